"""``dashboards.report.report`` after a run: what it reads back from the stores besides the outcome (each cell's
selection, the cost) only warns when the stores do not answer; the run is done and stored, so it must not fail."""

from __future__ import annotations

from types import SimpleNamespace

from dashboards import report as report_module
from harness.driver import tiny_spec
from study.intake.layout import StudyLayout
from study.intake.loading import parse_spec
from study.intake.plan import StudyPlan
from study.runtime.run_progress import RunWall


def test_a_store_that_does_not_answer_after_the_run_is_a_warning_and_the_report_goes_on(tmp_path, monkeypatch, capsys):
    spec = parse_spec({**tiny_spec("t_report", 1, 2, replicates=2), "storage": str(tmp_path)})
    plan = StudyPlan.of_study(spec)

    def gone(*args, **kwargs):
        raise OSError("the store went away")

    monkeypatch.setattr(report_module, "cells_status", gone)
    monkeypatch.setattr(report_module, "study_cost_report", gone)
    outcome = SimpleNamespace(
        best_value=0.5,
        best_trial_id="t1",
        best_params={"ms_alpha": 2.0},
        cell_bests={},
        final=[],
        parent_run_id="p",
        race=[],
    )
    report_module.report(plan, StudyLayout.for_spec(spec), outcome, (None, RunWall(0.0)))  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert "Best trial t1: test/recall_at_1 = 0.5000" in out and "selection:" not in out
    assert "warning: the study's cell status was not read back: OSError: the store went away" in err
    assert "warning: the study's cost was not read back: OSError: the store went away" in err


def test_the_selection_line_logged_to_the_parent_run_is_the_printed_one_and_the_dashboard_reads_it(
    tmp_path, monkeypatch
):
    from dashboards.load import _reliability, _selection_lines
    from study.cell_status import CellStatus
    from study.final.reliability import Reliability, RungChoice
    from study.tracking import stores

    spec = parse_spec({**tiny_spec("t_report", 1, 2, replicates=2), "storage": str(tmp_path)})
    plan = StudyPlan.of_study(spec)
    first, second = plan.cells
    cells = [
        CellStatus(first, {}, 0.5, reliability=Reliability(4, 1, 0.4, (1, 3), 0.25, 1000)),
        CellStatus(second, {}, 0.5, reliability=RungChoice(3, 2, 1, "why")),
    ]
    logged = SimpleNamespace(metrics={}, tags={})
    client = SimpleNamespace(
        log_metric=lambda run, key, value: logged.metrics.__setitem__(key, value),
        set_tag=lambda run, key, value: logged.tags.__setitem__(key, value),
    )
    monkeypatch.setattr(stores, "mlflow_client", lambda uri: client)
    report_module._log_selection(StudyLayout.for_spec(spec), "parent", cells)
    assert sorted(_selection_lines(logged.tags).values()) == sorted(report_module.selection_lines(cells))
    assert _selection_lines(logged.tags)[first.label].startswith(f"selection: {first.label}: the winner is one of 2")
    assert _reliability(logged.metrics)[first.label]["p_best"] == 0.4
    assert _reliability(logged.metrics)[second.label] == {"candidates": 2.0, "rung_epoch": 3.0}

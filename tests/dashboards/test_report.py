"""``dashboards.report.report`` after a run: what it reads back from the stores besides the outcome (each cell's
selection, the cost) only warns when the stores do not answer; the run is done and stored, so it must not fail."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dashboards import report as report_module
from harness.driver import tiny_spec
from study.intake.layout import StudyLayout
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.runtime.driver_run import RunWall


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
        stage_lines=[],
    )
    report_module.report(plan, StudyLayout.for_spec(spec), outcome, (None, RunWall(0.0)))  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert "Best trial t1: test/recall_at_1 = 0.5000" in out and "selection:" not in out
    assert "warning: the study's cell status was not read back: OSError: the store went away" in err
    assert "warning: the study's cost was not read back: OSError: the store went away" in err


def test_the_selection_line_logged_to_the_parent_run_is_the_printed_one_and_the_dashboard_reads_it(
    tmp_path, monkeypatch
):
    from dashboards.study_info import _reliability, _selection_lines
    from study.cell_status import CellStatus
    from study.final.reliability import Reliability, RungChoice
    from study.tracking import doors

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
    monkeypatch.setattr(doors, "mlflow_client", lambda uri: client)
    report_module._log_selection(StudyLayout.for_spec(spec), "parent", cells)
    assert sorted(_selection_lines(logged.tags).values()) == sorted(report_module.selection_lines(cells))
    assert _selection_lines(logged.tags)[first.label].startswith(f"selection: {first.label}: the winner is one of 2")
    assert _reliability(logged.metrics)[first.label]["p_best"] == 0.4
    assert _reliability(logged.metrics)[second.label] == {"candidates": 2.0, "rung_epoch": 3.0}


def test_a_replicated_study_pools_the_complete_replicates_and_says_which_is_left_out(capsys):
    """Three replicates: the third has no final test/recall_at_1 (its runs failed), and only the second logged
    test/nmi. Each metric is pooled over its complete replicates, and a line says which one is left out."""
    from study.final.intervals import replicated_mean

    recall = [{0: 0.70, 1: 0.72, 2: 0.71}, {0: 0.66, 1: 0.69, 2: 0.70}, {}]
    groups = [
        SimpleNamespace(by_seed={"test/recall_at_1": recall[0]}),
        SimpleNamespace(by_seed={"test/recall_at_1": recall[1], "test/nmi": {0: 0.5, 1: 0.52}}),
        SimpleNamespace(by_seed={}),
    ]
    report_module._print_replicated(groups)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "each part at its own t quantile" in out and "smaller one's degrees of freedom" not in out
    assert (
        "test/recall_at_1: replicate 2 has no final values (none of its final runs finished): pooled over "
        "replicates 0, 1"
    ) in out
    mean, low, high, seeds = replicated_mean(recall[:2])
    assert f"test/recall_at_1 = {mean:.4f} [{low:.4f}, {high:.4f}] over 2 replicates × {seeds} seeds" in out
    assert "replicates' means 0.6833 to 0.7100" in out
    # test/nmi, which the first replicate lacks, is still printed: over the one replicate that has it, said.
    assert "test/nmi: replicate 0 has no final values" in out and "pooled over replicate 1\n" in out
    nmi = replicated_mean([{0: 0.5, 1: 0.52}])
    assert f"test/nmi = {nmi.value:.4f} [{nmi.low:.4f}, {nmi.high:.4f}] over 1 replicate × 2 seeds" in out


def test_each_cells_budget_line_comes_from_its_optuna_trials(tmp_path):
    """A study with 2 replicates: replicate 0's 6 trials have two close best scores far above the rest and a tie set
    of 2 (still climbing); replicate 1's choice was made at a rung (no tie set: the bootstrap sd)."""
    import optuna

    from study.cell_status import CellStatus
    from study.final.reliability import Reliability

    spec = parse_spec({**tiny_spec("t_budget", 1, 6, replicates=2), "storage": str(tmp_path)})
    plan = StudyPlan.of_study(spec)
    layout = StudyLayout.for_spec(spec)
    Path(layout.root).mkdir(parents=True, exist_ok=True)
    dist = {"ms_alpha": optuna.distributions.FloatDistribution(1.0, 3.0)}
    for cell, values in zip(plan.cells, ([0.0, 0.0, 0.0, 0.0, 0.99, 1.0], [0.5, 0.5, 0.5, 0.5, 0.5])):
        study = optuna.create_study(study_name=cell.study_name, storage=layout.optuna_url, direction="maximize")
        for v in values:
            study.add_trial(optuna.trial.create_trial(params={"ms_alpha": 2.0}, distributions=dist, value=v))
    first, second = plan.cells
    cells = [
        CellStatus(first, {}, 1.0, reliability=Reliability(6, 5, 0.6, (5, 4), None, 1000)),
        CellStatus(second, {}, 0.5, reliability=Reliability(5, 0, 0.2, (0, 1, 2), None, 1000, rung=1)),
    ]
    curves = report_module.cell_curves(plan, layout, cells)
    lines = report_module.budget_lines(curves)
    assert lines[0].startswith(f"budget: {first.label}: still climbing at n = 6: the last 3 trials improved")
    assert "the tie set's spread 0.0100 (2 candidates); 6 of 6 ended trials trained every epoch" in lines[0]
    assert lines[1].startswith(f"budget: {second.label}: flat at n = 5: the last 3 trials improved the expected best")
    assert "no tie set of two or more" in lines[1]

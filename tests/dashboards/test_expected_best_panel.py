"""The "Expected best validation vs trials" panel of a table: each cell's Optuna study by its label, the tie set's
size from the parent's selection metrics, a trial stopped at a rung left out, and the crossing of an arm's curve with
the reference arm's."""

from __future__ import annotations

from pathlib import Path

import optuna
import polars as pl
import pytest

from dashboards.load import DashboardData, StudyInfo
from dashboards.panels.expected_best import TITLE, build, cell_label

EPOCHS = 3


def _add(study: optuna.Study, value: float, state: str = "COMPLETE", steps: dict[int, float] | None = None) -> None:
    dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 0.5},
            distributions=dist,
            value=value,
            state=optuna.trial.TrialState[state],
            intermediate_values=steps or {e: value for e in range(1, EPOCHS + 1)},
        )
    )


def _table(tmp_path: Path) -> DashboardData:
    """Table ``tbl`` at one condition: ms (the reference) scores 0.6 every trial; bspml 0.2, one trial in ten 0.9,
    plus a trial stopped at the rung of epoch 1 with 0.95 (no full score)."""
    study_dir = tmp_path / "tbl"
    study_dir.mkdir()
    storage = f"sqlite:///{study_dir / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ms = optuna.create_study(study_name="tbl.ms.p0.2", storage=storage, direction="maximize")
    bspml = optuna.create_study(study_name="tbl.bspml.p0.2", storage=storage, direction="maximize")
    for _ in range(10):
        _add(ms, 0.6)
    for v in [0.2] * 9 + [0.9]:
        _add(bspml, v)
    _add(bspml, 0.95, "PRUNED", {1: 0.95})
    info = StudyInfo(
        experiment="tbl",
        experiment_id="1",
        parent_run_id="p",
        status="FINISHED",
        study_dir=str(study_dir),
        metric="val/recall_at_1",
        mode="max",
        num_trials_planned=10,
        space={},
        best_trial_id=None,
        reference="ms",
        # bspml's winner ties with one other candidate; ms's choice was made at a rung: no tie set for its curve.
        reliability={"bspml.p0.2": {"tie_set": 2.0}, "ms.p0.2": {"tie_set": 3.0, "rung_epoch": 2.0}},
    )
    runs = pl.DataFrame({"experiment": ["tbl"], "stage": ["search"], "p/train.epochs": [str(EPOCHS)]})
    empty = pl.DataFrame()
    return DashboardData("sqlite:///x", [info], runs, empty, empty, empty)


def test_a_tables_cells_their_tie_sets_and_the_crossing_with_the_reference(tmp_path):
    panel = build(_table(tmp_path))
    assert panel.title == TITLE and panel.drawn and not panel.skipped
    (figure,) = [b for b in panel.blocks if getattr(b, "name", "") == "expected_best_tbl"]
    assert figure.png.startswith(b"\x89PNG")
    (table,) = [b.table for b in panel.blocks if getattr(b, "name", "") == "expected_best_table"]
    rows = {r["cell"]: r for r in table.iter_rows(named=True)}
    assert set(rows) == {"ms.p0.2", "bspml.p0.2"}
    # The trial stopped at the rung of epoch 1 is left out, and counted.
    assert rows["bspml.p0.2"]["trials"] == "10 of 11 ended trials trained every epoch"
    # bspml: E[best of k] = 0.2 + 0.7 (1 − 0.9^k); the last 5 trials raised it by 0.7 (0.9^5 − 0.9^10), less than
    # its tie set's spread, the best minus the second best: 0.9 − 0.2.
    assert float(rows["bspml.p0.2"]["E[best of 1]"]) == pytest.approx(0.27)
    assert float(rows["bspml.p0.2"]["rise"]) == pytest.approx(0.7 * (0.9**5 - 0.9**10), abs=5e-5)
    assert rows["bspml.p0.2"]["held against"] == "0.7000" and rows["bspml.p0.2"]["answer"] == "flat at n = 10"
    notes = [b.text for b in panel.blocks if hasattr(b, "text")]
    assert any(n.startswith("budget: bspml.p0.2: flat at n = 10") and "tie set's spread 0.7000" in n for n in notes)
    assert any(n.startswith("budget: ms.p0.2: flat at n = 10") and "no tie set of two or more" in n for n in notes)
    # 0.2 + 0.7 (1 − 0.9^k) passes 0.6 from k > ln(3/7)/ln(0.9) = 8.04 on.
    assert (
        "tbl: bspml.p0.2 vs ms.p0.2: the curves cross at k = 9: a verdict that flips with the budget "
        "(ms.p0.2 leads at k = 1, bspml.p0.2 at k = 10)"
    ) in notes


def test_without_an_optuna_storage_the_panel_says_why(tmp_path):
    data = _table(tmp_path)
    (tmp_path / "tbl" / "optuna.db").unlink()
    panel = build(data)
    assert not panel.drawn and "Optuna storage" in panel.skipped


@pytest.mark.parametrize(
    "experiment, name, table, label",
    [
        ("tbl", "tbl.ms.p0.2", True, "ms.p0.2"),
        ("tbl", "tbl.ms.p0.2.r1", True, "ms.p0.2.r1"),
        ("synth", "synth", False, "synth"),
        ("synth", "synth.r1", False, "synth.r1"),
    ],
)
def test_cell_labels_from_optuna_study_names(experiment, name, table, label):
    assert cell_label(experiment, name, table) == label

"""The report's whole-run slot use: the search trials' wall (their Optuna trials') and the final runs' (MLflow's
``cost/wall_s``) over the slots, against the driver's wall time; from constructed cells and a runs frame, no Ray."""

from __future__ import annotations

import polars as pl
import pytest

from dashboards.load import METRIC, DashboardData
from dashboards.table_report import final_wall_s, whole_run_use
from harness.driver import tiny_table
from study.cell_status import CellStatus
from study.intake.cells import parse_table
from study.runtime.driver_run import RunProgress, RunWall, append_driver_wall, run_wall
from trainables.schema import record as R
from trainables.schema.metric_names import COST_WALL


def _data(rows: list[dict]) -> DashboardData:
    return DashboardData("", [], pl.DataFrame(rows), pl.DataFrame(), pl.DataFrame(), pl.DataFrame())


def _final(wall: float | None, status: str = "FINISHED", stage: str = R.STAGE_FINAL) -> dict:
    return {R.STAGE: stage, "status": status, METRIC + COST_WALL: wall}


def test_whole_run_slot_use_adds_the_final_runs_to_the_search_trials() -> None:
    table = parse_table(tiny_table("t", epochs=2, batches_per_epoch=2, num_trials=2, seeds=2), "t")
    cells = [CellStatus(c, {"COMPLETE": 2}, 0.5, wall_s=w) for c, w in zip(table.cells, (100.0, 140.0), strict=True)]
    # Four finished final runs (one without a wall: 0), one failed and one search run: neither of the last counts.
    rows = [_final(30.0), _final(50.0), _final(20.0), _final(None), _final(999.0, "FAILED")]
    data = _data([*rows, _final(999.0, stage=R.STAGE_SEARCH)])
    assert final_wall_s(data) == pytest.approx(100.0)
    use = whole_run_use(cells, data, 2, RunWall(200.0))
    assert use is not None and use.trial_s == pytest.approx(340.0) and use.ratio == pytest.approx(200.0 / 170.0)
    assert use.text().startswith("whole-run slot use: 3.3 min wall for 5.7 min of trial time on 2 slots = 1.18")
    assert whole_run_use(cells, None, 2, RunWall(200.0)) is None  # the study's runs were not read
    assert final_wall_s(_data([{R.STAGE: R.STAGE_FINAL, "status": "FINISHED"}])) is None  # no wall logged


def _driver(study_dir, run_s: float, resumed: bool) -> None:
    append_driver_wall(study_dir, RunProgress(3, 1.0, 1.0, run_s, "SIGTERM", 3), resumed)


def test_a_resumed_runs_slot_use_counts_every_drivers_wall(tmp_path) -> None:
    """Issue 60 item 9: after --resume, the whole-run line divided every driver's trial time by the last driver's wall
    (here 200 s for 340 s of trial time on 2 slots: 1.18, where the three drivers held the slots 500 s: 2.94)."""
    table = parse_table(tiny_table("t", epochs=2, batches_per_epoch=2, num_trials=2, seeds=2), "t")
    cells = [CellStatus(c, {"COMPLETE": 2}, 0.5, wall_s=w) for c, w in zip(table.cells, (100.0, 140.0), strict=True)]
    data = _data([_final(100.0)])
    _driver(tmp_path, 999.0, resumed=False)  # an earlier study of the same name, deleted and started again:
    _driver(tmp_path, 120.0, resumed=False)  # this run's first driver (the chain starts at the last non-resumed one)
    _driver(tmp_path, 180.0, resumed=True)
    with open(tmp_path / R.DRIVER_WALLS_FILE, "a") as f:
        f.write('{"run_s": 5')  # a line torn by a crash
    wall = run_wall(tmp_path, 200.0, resumed=True)
    assert (wall.seconds, wall.drivers, wall.complete) == (500.0, 3, True)
    use = whole_run_use(cells, data, 2, wall)
    assert use is not None and use.ratio == pytest.approx(500.0 / 170.0)
    assert use.text().endswith("(wall: all 3 drivers')")
    assert run_wall(tmp_path, 200.0, resumed=False) == RunWall(200.0)  # a run that did not resume is one driver
    # No record of the first driver (a remote storage, a study from before the record): said, not hidden.
    partial = run_wall(None, 200.0, resumed=True)
    assert not partial.complete and "an earlier driver left no record" in partial.label()

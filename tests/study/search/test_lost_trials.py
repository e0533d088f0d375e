"""One truth per trial after a node dies: a lost trial (errored for a reason outside its configuration) is told FAIL
in Optuna only once Ray's saved state says Ray will not run it again (study/search/cell_search.py).

The driver can end at any point of the window between the trial's error and Ray's next experiment snapshot. Each
test puts the end at one point and restores as ``Tuner.restore`` does: a new searcher from the plan, the searcher
snapshot Ray kept (:meth:`CellSearch.save` / :meth:`CellSearch.restore`), then the first step's
:meth:`CellSearch.reconcile` with the trials Ray's own (possibly older or newer) snapshot restored; Ray then runs on
what it restored. Every cell must end with its budget of COMPLETE Optuna trials, each Ray trial that finished COMPLETE
exactly once, and a FAIL only for a trial Ray did not finish. Real Optuna on the table's SQLite storage; Ray's loop
is simulated (tests/study/search/test_table_search.py). The Ray end-to-end runs: test_table_failures.py (a lost
worker, the run goes on) and test_private_ray_death.py (the node dies, the driver stops, ``--resume``)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from study.intake.layout import StudyLayout
from study.intake.load import load_plan
from study.search.cell_search import CellSearch
from study.search.tuners import cell_searcher
from trainables.schema.metric_names import EPOCH
from trainables.schema.record import OPTUNA_RAY_TRIAL_ID

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
METRIC = "val/recall_at_1"
BUDGET = 3


def _plan(tmp_path: Path):
    overrides = [f"storage={tmp_path}", f"search.num_trials={BUDGET}", "search.max_concurrent=2"]
    plan = load_plan(SPACES / "table_glyphs_quick.yaml", overrides)
    StudyLayout.for_spec(plan.base).mkdir()
    return plan


def _searcher(plan) -> CellSearch:
    return cell_searcher(plan, StudyLayout.for_spec(plan.base))


def _result(config: dict) -> dict:
    epochs = 4
    value = sum(math.sin(3.0 * v) for v in config.values() if isinstance(v, float))
    return {METRIC: value, EPOCH: epochs, "training_iteration": epochs}


class Ray:
    """Ray's side of the run, simulated: trial ids, configs, which trials run."""

    def __init__(self) -> None:
        self.calls = 0
        self.running: dict[str, dict] = {}

    def ask(self, search: CellSearch, slots: int = 2) -> None:
        while len(self.running) < slots:
            trial_id = f"ray_{self.calls}"
            self.calls += 1
            config = search.suggest(trial_id)
            if config is None or config == CellSearch.FINISHED:
                return
            self.running[trial_id] = config  # a search trial, or a cell's final seed (FINAL_KEY)

    def finish_all(self, search: CellSearch) -> None:
        """Run to the end: ask, finish the oldest, until the searcher is done."""
        while True:
            self.ask(search)
            if not self.running:
                assert search.suggest(f"ray_{self.calls}") == CellSearch.FINISHED
                return
            trial_id = next(iter(self.running))
            search.on_trial_complete(trial_id, _result(self.running.pop(trial_id)))


def _states(plan) -> dict[str, list[str]]:
    layout = StudyLayout.for_spec(plan.base)
    return {
        c.label: [
            t.state.name for t in optuna.load_study(study_name=c.study_name, storage=layout.optuna_url).get_trials()
        ]
        for c in plan.cells
    }


def _ray_ids(plan) -> dict[str, list[str | None]]:
    layout = StudyLayout.for_spec(plan.base)
    return {
        c.label: [
            t.user_attrs.get(OPTUNA_RAY_TRIAL_ID)
            for t in optuna.load_study(study_name=c.study_name, storage=layout.optuna_url).get_trials()
            if t.state.name == "COMPLETE"
        ]
        for c in plan.cells
    }


def _restored(plan, snapshot: Path) -> CellSearch:
    search = _searcher(plan)
    search.restore(str(snapshot))
    return search


def _lose_one(search: CellSearch, ray: Ray) -> str:
    """Start two trials, then lose the first (its node died): Ray reports it errored."""
    ray.ask(search)
    lost = next(iter(ray.running))
    search.on_trial_complete(lost, None, error=True)
    return lost


def _lose_with_snapshot(search: CellSearch, ray: Ray, tmp_path: Path, snapshot_at: str) -> tuple[str, Path]:
    """Start two trials and lose the first, the searcher's snapshot (Ray's ``save``) taken ``snapshot_at``: "before
    the error" or "after the error". Returns the lost trial and the snapshot."""
    ray.ask(search)
    lost = next(iter(ray.running))
    snapshot = tmp_path / "searcher.pkl"
    if snapshot_at == "before the error":
        search.save(str(snapshot))
    search.on_trial_complete(lost, None, error=True)
    if snapshot_at == "after the error":
        search.save(str(snapshot))
    return lost, snapshot


def test_a_lost_trial_stays_running_in_optuna_until_the_search_ends_whole_then_fails_and_is_replaced(tmp_path):
    plan = _plan(tmp_path)
    search, ray = _searcher(plan), Ray()
    lost = _lose_one(search, ray)
    ray.running.pop(lost)
    assert "FAIL" not in [s for states in _states(plan).values() for s in states]  # Ray's snapshot may not say so yet
    ray.finish_all(search)
    assert search.settle_lost(set()) == [lost]  # the experiment ended whole, after Ray's last snapshot
    states = _states(plan)
    assert sorted(s for st in states.values() for s in st) == sorted(
        ["FAIL"] + ["COMPLETE"] * (BUDGET * len(plan.cells))
    )
    assert all(st.count("COMPLETE") == BUDGET for st in states.values())  # the lost trial was replaced


@pytest.mark.parametrize("snapshot_at", ["before the error", "after the error"])
def test_a_trial_ray_restores_and_finishes_counts_once_as_complete(tmp_path, snapshot_at):
    """The driver ends after the trial's error; Ray's snapshot holds the trial unfinished (it restores it from its
    checkpoint); the searcher's snapshot is from before the error, or after it (written after Ray's trial list)."""
    plan = _plan(tmp_path)
    ray = Ray()
    lost, snapshot = _lose_with_snapshot(_searcher(plan), ray, tmp_path, snapshot_at)

    restored = _restored(plan, snapshot)
    told = restored.reconcile([(t, "RUNNING", None) for t in ray.running])
    assert told == []
    ray.finish_all(restored)
    states = _states(plan)
    assert all(st == ["COMPLETE"] * BUDGET for st in states.values()), states  # no FAIL, no replacement
    assert lost in [i for ids in _ray_ids(plan).values() for i in ids]  # the restored trial is the COMPLETE one


@pytest.mark.parametrize("snapshot_at", ["before the error", "after the error"])
def test_a_trial_ray_holds_as_errored_is_told_fail_once_and_replaced(tmp_path, snapshot_at):
    """Ray's snapshot holds the trial ERROR (it will not run it again); the searcher's snapshot is from before the
    error (older than Ray's trial list) or after it (the trial held as lost)."""
    plan = _plan(tmp_path)
    ray = Ray()
    lost, snapshot = _lose_with_snapshot(_searcher(plan), ray, tmp_path, snapshot_at)
    ray.running.pop(lost)

    restored = _restored(plan, snapshot)
    statuses = [(lost, "ERROR", None), *((t, "RUNNING", None) for t in ray.running)]
    assert restored.reconcile(statuses) == [lost]
    assert restored.reconcile(statuses) == []  # told once
    ray.finish_all(restored)
    states = _states(plan)
    assert sorted(s for st in states.values() for s in st) == sorted(
        ["FAIL"] + ["COMPLETE"] * (BUDGET * len(plan.cells))
    )
    assert all(st.count("COMPLETE") == BUDGET for st in states.values())


def test_a_trial_that_finished_after_the_searchers_snapshot_is_told_complete_on_restore(tmp_path):
    """Ray's trial list is newer than the searcher's snapshot: it holds a trial TERMINATED that the restored
    searcher still waits for. The restore tells it with Ray's last result instead of waiting forever."""
    plan = _plan(tmp_path)
    search, ray = _searcher(plan), Ray()
    ray.ask(search)
    done = next(iter(ray.running))
    snapshot = tmp_path / "searcher.pkl"
    search.save(str(snapshot))
    last = _result(ray.running.pop(done))
    search.on_trial_complete(done, last)

    restored = _restored(plan, snapshot)
    restored.reconcile([(done, "TERMINATED", last), *((t, "RUNNING", None) for t in ray.running)])
    ray.finish_all(restored)
    states = _states(plan)
    assert all(st == ["COMPLETE"] * BUDGET for st in states.values()), states


def test_a_trial_ray_restored_as_finished_without_its_last_result_is_told_complete_from_optuna(tmp_path):
    """The driver died after the trial's last epoch reached Optuna and Ray marked it finished, before the searcher
    was told; Ray's restored trial carries no last result (seen after a warm head died mid-study: the trial was then
    told PRUNED). The restore tells it COMPLETE with the last epoch Optuna recorded."""
    plan = _plan(tmp_path)
    search, ray = _searcher(plan), Ray()
    ray.ask(search)
    done = next(iter(ray.running))
    search.on_trial_result(done, _result(ray.running.pop(done)))  # its last epoch, recorded in Optuna
    snapshot = tmp_path / "searcher.pkl"
    search.save(str(snapshot))

    restored = _restored(plan, snapshot)
    restored.reconcile([(done, "TERMINATED", None), *((t, "RUNNING", None) for t in ray.running)])
    ray.finish_all(restored)
    states = _states(plan)
    assert all(st == ["COMPLETE"] * BUDGET for st in states.values()), states

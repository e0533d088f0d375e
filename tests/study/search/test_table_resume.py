"""A table's driver SIGKILLed mid-search and resumed (issue 40), and while a cell's final seeds run beside the search
(issue 50): Ray restores the experiment and the table's dispatcher (``CellSearch.restore``: every cell's searcher with its counts), so each cell ends with exactly its budget of Optuna
trials, and nothing is counted twice. A dispatcher that forgot its counts asks every cell's budget again, or waits
for ever on the trials it no longer knows (measured: the resume then times out). Read back from Optuna and MLflow. (A study's kill and resume: tests/study/test_resume.py.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from harness.driver import final_groups_running, mlflow_children, optuna_states, tiny_table
from harness.kill_resume import (
    EPOCHS,
    kill_then_resume,
    restarted_rows,
    snapshot_has_checkpointed_trial_in_flight,
)
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

NAME = "t_table_kill"
FINALS = "t_table_kill_f"  # the table killed while a cell's final seeds run
TRIALS = 3  # per cell
CELLS = ["ms.p0.2", "spl.p0.2"]


def _table() -> dict:
    """Two arms × one condition, 3 trials per cell one at a time, 1 final seed: digits, 3 epochs of 160 batches (about
    a second each, as the study's kill test: with short epochs Ray's snapshot almost never holds a trial mid-way, and
    the table ends before the kill point on a quiet machine)."""
    return tiny_table(NAME, EPOCHS, 160, TRIALS, 1)


def _states(study_dir: Path, name: str = NAME) -> dict[str, list[str]]:
    """Per cell, its Optuna trials' states (no entry for a cell whose study does not exist yet), read read-only."""
    states = optuna_states(study_dir)
    return {c: states[f"{name}.{c}"] for c in CELLS if f"{name}.{c}" in states}


def test_a_killed_table_resumes_through_its_dispatcher(tmp_path):
    at_kill: dict[str, list[str]] = {}

    def mid_search(study_dir: Path) -> bool:
        """Two trials COMPLETE (so the dispatcher's counts matter) and a checkpointed trial in Ray's snapshot."""
        try:
            states = _states(study_dir)
        except Exception:  # the store is being created or written
            return False
        done = sum(s.count("COMPLETE") for s in states.values())
        if done >= 2 and snapshot_has_checkpointed_trial_in_flight(study_dir / ""):
            at_kill.update(states)
            return True
        return False

    out = kill_then_resume(tmp_path, _table(), mid_search, timeout=300, status=False)
    resumed, study_dir = out["resumed"], out["study_dir"]
    assert not out["finished_before_kill"], "the table ended before the kill point"
    assert resumed.returncode == 0, out["first_output"][-2000:] + resumed.stdout[-2000:] + resumed.stderr[-3000:]
    killed_mid_search = sum(s.count("COMPLETE") for s in at_kill.values())
    assert 2 <= killed_mid_search < len(CELLS) * TRIALS, at_kill

    # Every cell has exactly its budget, all COMPLETE: no orphan left RUNNING, no trial asked twice or extra.
    assert _states(study_dir) == {c: ["COMPLETE"] * TRIALS for c in CELLS}
    # Ray restored the experiment: a trial in flight at the kill went on from its epoch checkpoint.
    assert restarted_rows(study_dir), "no trial resumed from a checkpoint"
    # MLflow: one FINISHED search run per Optuna trial, per cell; one final run per cell; nothing RUNNING.
    _, parents, children = mlflow_children(study_dir, NAME)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    search = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_SEARCH]
    final = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_FINAL]
    assert all(r.info.status == "FINISHED" for r in children), [r.info.status for r in children]
    assert len({r.data.tags[R.TRIAL_ID] for r in search}) == len(search) == len(CELLS) * TRIALS
    assert Counter(r.data.tags[R.FAMILY] for r in search) == {"ms": TRIALS, "spl": TRIALS}
    assert sorted(r.data.tags[R.GROUP] for r in final) == CELLS


def test_a_table_killed_while_a_cells_final_seeds_run_beside_the_search_resumes_them_once(tmp_path):
    """Issue 50: a cell's final seeds start as soon as its own search ends, in the search's experiment, while the
    other cell still searches. Killed there (a final trial running, the other cell's search not done), the
    resumed table runs every final seed exactly once: a final trial Ray's snapshot held goes on (from its checkpoint
    where the snapshot has one); one it did not hold is forgotten with the snapshot, asked again by the restored
    searcher, and its first run deleted. (That a trial in flight resumes from its checkpoint is the first test's.)

    The kill point is read from MLflow (a final run RUNNING), which the driver writes as Ray tells it. A trial's
    folder, read before, reaches the storage only when Ray syncs it, so on a fast machine a final trial could start
    and end between two syncs and the table end before the kill point (seen once in CI). One trial runs at a time, so
    the window is certain: the first cell's two final seeds run before the other cell's last search trial."""
    at_kill: dict[str, object] = {}

    def final_beside_search(study_dir: Path) -> bool:
        try:
            running, states = final_groups_running(study_dir), _states(study_dir, FINALS)
        except Exception:  # the store is being created or written
            return False
        searching = [c for c in CELLS if states.get(c, []).count("COMPLETE") < TRIALS]
        if running and searching:
            at_kill.update(group=running[0], searching=searching)
            return True
        return False

    table = tiny_table(FINALS, EPOCHS, 160, TRIALS, 2)
    out = kill_then_resume(tmp_path, table, final_beside_search, timeout=300, status=False)
    resumed, study_dir = out["resumed"], out["study_dir"]
    assert not out["finished_before_kill"], "the table ended before the kill point"
    assert resumed.returncode == 0, out["first_output"][-2000:] + resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert at_kill["group"] not in at_kill["searching"], at_kill  # a cell's finals ran while another cell searched
    # MLflow: every final seed once (none lost, none twice), all FINISHED, all trials of the search's experiment.
    _, parents, children = mlflow_children(study_dir, FINALS)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    final = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_FINAL]
    assert all(r.info.status == "FINISHED" for r in children), [r.info.status for r in children]
    seeds = Counter((r.data.tags[R.GROUP], r.data.params["seed"]) for r in final)
    assert seeds == {(c, str(s)): 1 for c in CELLS for s in range(2)}, seeds
    assert {r.data.tags[R.RAY_EXPERIMENT] for r in final} == {R.SEARCH_EXPERIMENT}
    assert not (study_dir / R.FINAL_EXPERIMENT).exists()  # no final stage after the search: nothing was left
    assert _states(study_dir, FINALS) == {c: ["COMPLETE"] * TRIALS for c in CELLS}

"""A table's driver SIGKILLed twice and resumed each time, in one chain: first mid-search (issue 40), then while a
cell's final seeds run beside the other cell's search (issue 50). Ray restores the experiment and the table's
dispatcher (``CellSearch.restore``: every cell's searcher with its counts), so each cell ends with exactly its budget
of Optuna trials, a trial in flight goes on from its epoch checkpoint, and every final seed runs exactly once. A
dispatcher that forgot its counts asks every cell's budget again, or waits for ever on the trials it no longer knows
(measured: the resume then times out). Read back from Optuna and MLflow. (A study's kill and resume:
tests/study/test_resume.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.driver import driver_env, final_groups_running, mlflow_children, optuna_states, tiny_table
from harness.kill_resume import EPOCHS, restarted_rows, run_and_stop, snapshot_has_checkpointed_trial_in_flight
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

NAME = "t_table_kill"
TRIALS, SEEDS = 3, 2  # per cell
CELLS = ["ms.p0.2", "spl.p0.2"]


def _table() -> dict:
    """Two arms × one condition, 3 trials per cell one at a time, 2 final seeds: digits, 3 epochs of 160 batches
    (about a second each: with shorter epochs Ray's one-second snapshot seldom holds a trial mid-way). One trial at a
    time makes the order certain: ms, spl, ms, spl, ms, then ms's two final seeds, then spl's last search trial."""
    return tiny_table(NAME, EPOCHS, 160, TRIALS, SEEDS)


def _states(study_dir: Path) -> dict[str, list[str]]:
    """Per cell, its Optuna trials' states (no entry for a cell whose study does not exist yet), read read-only."""
    states = optuna_states(study_dir)
    return {c: states[f"{NAME}.{c}"] for c in CELLS if f"{NAME}.{c}" in states}


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 1.0)


def test_a_table_killed_mid_search_then_beside_a_cells_final_seeds_resumes_each_time(tmp_path):
    """Kill 1 (S10): two trials COMPLETE (so the dispatcher's counts matter), every cell still searching, and a
    checkpointed trial in Ray's snapshot. Kill 2 (S17), in the run that resumed kill 1: a cell's final trial RUNNING
    (read from MLflow, which the driver writes as Ray tells it; a trial's folder reaches the storage only when Ray
    syncs it) while the other cell still searches. The last run resumes it to the end: every final seed exactly
    once, in the search's experiment (a final trial Ray's snapshot held goes on; one it did not hold is forgotten with
    the snapshot, asked again by the restored searcher, and its first run deleted)."""
    at_kill1: dict[str, list[str]] = {}
    at_kill2: dict[str, object] = {}

    def mid_search(study_dir: Path) -> bool:
        try:
            states = _states(study_dir)
        except Exception:  # the store is being created or written
            return False
        done = sum(s.count("COMPLETE") for s in states.values())
        searching = all(states.get(c, []).count("COMPLETE") < TRIALS for c in CELLS)
        if done >= 2 and searching and snapshot_has_checkpointed_trial_in_flight(study_dir / ""):
            at_kill1.update(states)
            return True
        return False

    def final_beside_search(study_dir: Path) -> bool:
        try:
            running, states = final_groups_running(study_dir), _states(study_dir)
        except Exception:  # the store is being created or written
            return False
        searching = [c for c in CELLS if states.get(c, []).count("COMPLETE") < TRIALS]
        if running and searching:
            at_kill2.update(group=running[0], searching=searching)
            return True
        return False

    spec = tmp_path / R.SPEC_FILE
    spec.write_text(yaml.safe_dump(_table()))
    study_dir = tmp_path / R.DEFAULT_STORAGE / NAME
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    # One deadline for the three drivers (under pytest's 900 s), so a slow first run leaves its slack to the others.
    deadline = time.monotonic() + 840
    try:
        env = driver_env(ray_tmp)
        first = run_and_stop(tmp_path, env, [str(spec)], study_dir, mid_search, None, timeout=_left(deadline))
        assert not first["finished_before_kill"], "the table ended before kill 1: " + first["output"][-2000:]
        second = run_and_stop(
            tmp_path, env, [str(spec), "--resume"], study_dir, final_beside_search, None, timeout=_left(deadline)
        )
        assert not second["finished_before_kill"], "the table ended before kill 2: " + second["output"][-2000:]
        resumed = subprocess.run(
            [sys.executable, "-m", "study.run", str(spec), "--resume"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=_left(deadline),
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    outputs = first["output"][-1500:] + second["output"][-1500:] + resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert resumed.returncode == 0, outputs
    killed_mid_search = sum(s.count("COMPLETE") for s in at_kill1.values())
    assert 2 <= killed_mid_search < len(CELLS) * TRIALS, at_kill1
    assert at_kill2["group"] not in at_kill2["searching"], at_kill2  # a cell's finals ran while another cell searched

    # Every cell has exactly its budget, all COMPLETE: no orphan left RUNNING, no trial asked twice or extra.
    assert _states(study_dir) == {c: ["COMPLETE"] * TRIALS for c in CELLS}
    # MLflow: one FINISHED search run per Optuna trial, per cell; every final seed once (none lost, none twice), all
    # trials of the search's experiment; nothing RUNNING.
    _, parents, children = mlflow_children(study_dir, NAME)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert all(r.info.status == "FINISHED" for r in children), [r.info.status for r in children]
    search = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_SEARCH]
    final = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_FINAL]
    assert len({r.data.tags[R.TRIAL_ID] for r in search}) == len(search) == len(CELLS) * TRIALS
    assert Counter(r.data.tags[R.FAMILY] for r in search) == {"ms": TRIALS, "spl": TRIALS}
    seeds = Counter((r.data.tags[R.GROUP], r.data.params["seed"]) for r in final)
    assert seeds == {(c, str(s)): 1 for c in CELLS for s in range(SEEDS)}, seeds
    assert {r.data.tags[R.RAY_EXPERIMENT] for r in final} == {R.SEARCH_EXPERIMENT}
    assert not (study_dir / R.FINAL_EXPERIMENT).exists()  # no final stage after the search: nothing was left
    # Ray restored the experiment at kill 1: a search trial in flight then went on from its epoch checkpoint (no
    # search trial runs at kill 2: the other cell's last one waits for the final seeds).
    search_ids = {r.data.tags[R.TRIAL_ID] for r in search}
    assert {trial for trial, _ in restarted_rows(study_dir)} & search_ids, (restarted_rows(study_dir), at_kill1)

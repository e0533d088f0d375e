"""A table's private Ray dies mid-search (issue 60, items 11 and 12): its raylet is SIGKILLed while a trial trains.
The driver ends within seconds with exit 3, one line naming what died and the ``--resume`` line, its runs KILLED and
no trial told FAILED; ``--resume`` then continues the trials from their checkpoints, and every cell ends with exactly
its budget: each trial once in Optuna (COMPLETE) and once in MLflow (FINISHED), no replacement.

Before: the driver logged "Cluster resources cannot be detected" until ``--pending-timeout`` and exited 1 blaming
the cluster; some 15 s after the raylet's death Ray failed the running trials ("Owner's node has crashed"), Optuna
recorded them FAIL and each cell asked a replacement, and ``--resume`` restored and finished them too (a cell with
4 Optuna trials for a budget of 3, 8 FINISHED search runs for 6). The watch alone: test_private_ray_watch.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from harness.driver import (
    count_in_mlflow,
    driver_env,
    kill_driver,
    optuna_states,
    private_raylet,
    start_driver,
    tiny_table,
)
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

NAME = "t_ray_death"
#: How soon after the raylet's death the driver must have ended (it polls every 0.5 s; Ray fails the trials ~15 s in).
ENDS_WITHIN_S = 10.0


def _search_runs(study_dir, status: str) -> int:
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE t.key = ? AND t.value = ? AND r.status = ? AND r.lifecycle_stage = 'active'",
        (R.STAGE, R.STAGE_SEARCH, status),
    )


def _epochs(study_dir) -> int:
    return count_in_mlflow(study_dir, "SELECT count(*) FROM metrics WHERE key = 'test/recall_at_1'")


def test_a_dead_private_ray_ends_the_driver_at_once_and_resume_keeps_every_cells_budget(tmp_path):
    table = tiny_table(NAME, 4, 30, 1, 1)  # ms and spl, one trial each, both at once; one final seed per cell
    table["search"]["max_concurrent"] = 2
    spec = tmp_path / "table.yaml"
    spec.write_text(yaml.safe_dump(table, sort_keys=False))
    study_dir = tmp_path / R.DEFAULT_STORAGE / NAME
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    proc = start_driver(tmp_path, driver_env(ray_tmp), str(spec), "--no-dashboard")
    try:
        deadline = time.monotonic() + 240
        while _epochs(study_dir) < 1:  # a trial is past its first epoch (a checkpoint to resume from)
            assert proc.poll() is None and time.monotonic() < deadline, "no trial reached epoch 1"
            time.sleep(0.1)
        raylet = private_raylet(ray_tmp)
        assert raylet is not None
        os.kill(raylet, signal.SIGKILL)
        killed = time.monotonic()
        try:
            output, _ = proc.communicate(timeout=ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver was still running {ENDS_WITHIN_S:g} s after its private raylet died")
        took = time.monotonic() - killed
    finally:
        kill_driver(proc, ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 3, output[-3000:]
    assert f"the study's private Ray node died (raylet pid {raylet} was killed by SIGKILL" in output, output[-3000:]
    last = output.rstrip().splitlines()[-1]
    assert last.startswith("stopped; continue it with: ") and last.endswith("--resume"), output[-1000:]
    assert took < ENDS_WITHIN_S
    assert _search_runs(study_dir, "RUNNING") == _search_runs(study_dir, "FAILED") == 0  # KILLED, none failed
    assert all("FAIL" not in states for states in optuna_states(study_dir).values()), optuna_states(study_dir)

    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    try:
        resumed = subprocess.run(
            [sys.executable, "-m", "study.run", str(spec), "--no-dashboard", "--resume"],
            cwd=tmp_path,
            env=driver_env(ray_tmp),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # Every cell exactly its budget, each trial once: COMPLETE in Optuna, FINISHED in MLflow, no replacement.
    assert optuna_states(study_dir) == {f"{NAME}.ms.p0.2": ["COMPLETE"], f"{NAME}.spl.p0.2": ["COMPLETE"]}
    assert _search_runs(study_dir, "FINISHED") == 2
    assert _search_runs(study_dir, "FAILED") == _search_runs(study_dir, "KILLED") == 0

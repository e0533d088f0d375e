"""A table with ``search.replicates: {min: 2, max: 3}`` stopped between replicate rounds (SIGUSR1 as its first round's
final runs end) and again mid-round (SIGKILL, driver and Ray, once the later round's search has a trial done and Ray
a snapshot), resumed each time: every cell ends with exactly one Optuna trial and one search and one final run in
MLflow (no replicate ran twice, none was lost), the later round ran only the open comparison's cells, and
``--status`` says the comparison is not detectable after 3.

One final seed: the comparison (an A-vs-A-like pair of tiny searches) can never be judged (a seed part needs two
seeds), so it stays open and the round at 3 replicates always runs."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml

from harness.driver import driver_env, final_runs_finished, mlflow_children, optuna_states, tiny_table
from harness.kill_resume import continue_args, run_and_stop, run_to_end, signal_driver, status_of
from study.runtime.stopping import EXIT_STOPPED
from study.search.stages.rounds import ROUNDS_DIR
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

NAME = "t_rounds"
FIRST = ["ms.p0.2", "ms.p0.2.r1", "spl.p0.2", "spl.p0.2.r1"]
LATER = ["ms.p0.2.r2", "spl.p0.2.r2"]


def _table() -> dict:
    """ms against spl at 20 % noise, 1 trial per cell, 1 epoch of 4 batches, 1 final seed, replicates {2, 3}."""
    table = tiny_table(NAME, 1, 4, 1, 1)
    table["search"]["replicates"] = {"min": 2, "max": 3}
    table["search"]["epoch_seconds"] = 1  # an assumed bill: no calibration before each driver
    return table


def _later_mid_round(study_dir: Path) -> bool:
    """A later round's search has a trial done and Ray has its snapshot (its other cell may be running)."""
    states = optuna_states(study_dir)
    done = sum(states.get(f"{NAME}.{c}", []).count("COMPLETE") for c in LATER)
    return done >= 1 and any((study_dir / ROUNDS_DIR / "3" / R.SEARCH_EXPERIMENT).glob("experiment_state-*.json"))


def test_a_table_of_rounds_stopped_between_rounds_and_mid_round_runs_each_replicate_once(tmp_path):
    spec = tmp_path / R.SPEC_FILE
    spec.write_text(yaml.safe_dump(_table()))
    study_dir = tmp_path / R.DEFAULT_STORAGE / NAME
    ray_tmp = tempfile.mkdtemp(prefix="rr", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        # 1. SIGUSR1 as the first round's last final run ends: the driver stops before the next round starts (or, if
        #    the signal lands as it starts, drains it): either way exit 3 with the command that continues it.
        between = run_and_stop(
            tmp_path, env, [str(spec)], study_dir, lambda d: final_runs_finished(d) >= len(FIRST),
            signal_driver(signal.SIGUSR1), timeout=400,
        )  # fmt: skip
        assert not between["finished_before_kill"] and between["code"] == EXIT_STOPPED, between["output"][-3000:]
        assert not any(optuna_states(study_dir).get(f"{NAME}.{c}", []).count("COMPLETE") for c in LATER)
        # 2. Resumed, then SIGKILLed (driver and Ray) mid-round: the later round's Ray experiment holds a snapshot.
        args = continue_args(between["output"])
        mid = run_and_stop(tmp_path, env, args, study_dir, _later_mid_round, None, timeout=400)
        assert not mid["finished_before_kill"], mid["output"][-3000:]
        # 3. Resumed to the end.
        done = run_to_end(tmp_path, env, [str(spec), "--resume", "--no-dashboard"], timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        status = status_of(tmp_path, env, [str(spec)])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)

    # Every cell, first round and later, has exactly one trial; nothing RUNNING, nothing asked twice.
    states = optuna_states(study_dir)
    assert {c: states.get(f"{NAME}.{c}") for c in FIRST + LATER} == {c: ["COMPLETE"] for c in FIRST + LATER}
    _, parents, children = mlflow_children(study_dir, NAME)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert all(r.info.status == "FINISHED" for r in children), [r.info.status for r in children]
    search = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_SEARCH]
    final = [r for r in children if r.data.tags[R.STAGE] == R.STAGE_FINAL]
    assert len({r.data.tags[R.TRIAL_ID] for r in search}) == len(search) == len(FIRST + LATER)
    assert Counter(r.data.tags[R.FAMILY] for r in search) == {"ms": 3, "spl": 3}
    assert sorted(r.data.tags[R.GROUP] for r in final) == sorted(FIRST + LATER)
    # The later round ran in its own folder; the summary holds every round's groups.
    assert (study_dir / ROUNDS_DIR / "3" / R.SEARCH_EXPERIMENT).is_dir()
    assert "comparison spl.p0.2 vs ms.p0.2: not detectable at this budget after 3" in status.stdout, status.stdout

"""A table's failed trials through real Ray (issue 40): a trial whose worker dies (SIGKILL of its Ray actor: what a lost
node looks like to Ray) is replaced, so its cell still ends with its budget of COMPLETE Optuna trials; a trial whose
loss is not finite counts as evaluated (FAIL, marked ``failure: nonfinite``) and is not replaced. Read back from
Optuna, and from ``--status``. The dispatcher's accounting alone, without Ray: tests/study/intake/test_cells.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
import yaml

from harness.driver import count_in_mlflow, driver_env, kill_driver, start_driver, tiny_table
from trainables.schema import record as R

pytestmark = pytest.mark.e2e

NAME = "t_table_fail"
TRIALS = 2


def _table() -> dict:
    """ms (the reference) and spl, whose every trial's loss overflows (SGD at lr 1e38); one trial at a time."""
    table = tiny_table(NAME, 3, 8, TRIALS, 1)
    table["train"] = {**table["train"], "optimizer": {"name": "sgd", "lr": 1.0e-3}}
    table["arms"]["spl"]["space"] = {"train.optimizer.lr": {"type": "categorical", "choices": [1.0e38]}}
    return table


def _ms_epochs(study_dir: Path) -> int:
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM metrics m JOIN tags t ON m.run_uuid = t.run_uuid "
        "WHERE m.key = 'test/recall_at_1' AND t.key = ? AND t.value = 'ms'",
        (R.FAMILY,),
    )


def _trial_workers(ray_tmp: str) -> list[int]:
    """The driver's Ray trial actors (``ray::ImplicitFunc``): Ray's workers inherit its private ``RAY_TMPDIR``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            if not cmdline.startswith("ray::ImplicitFunc"):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RAY_TMPDIR={ray_tmp}".encode() in environ:
            pids.append(int(entry.name))
    return pids


def test_a_lost_trial_is_replaced_and_a_nan_trial_counts_as_evaluated(tmp_path):
    spec = tmp_path / "table.yaml"
    spec.write_text(yaml.safe_dump(_table(), sort_keys=False))
    study_dir = tmp_path / R.DEFAULT_STORAGE / NAME
    ray_tmp = tempfile.mkdtemp(prefix="rf", dir="/tmp")
    env = driver_env(ray_tmp)
    proc = start_driver(tmp_path, env, str(spec), "--no-dashboard")
    try:
        deadline = time.monotonic() + 300
        while _ms_epochs(study_dir) < 1:  # an ms trial is in flight past its first epoch: kill its worker
            assert proc.poll() is None and time.monotonic() < deadline, "no ms trial reached epoch 1"
            time.sleep(0.1)
        workers = _trial_workers(ray_tmp)
        assert len(workers) == 1, workers  # one trial at a time: the ms trial's actor
        os.kill(workers[0], signal.SIGKILL)
        output, _ = proc.communicate(timeout=600)
    finally:
        kill_driver(proc)  # when it has ended: the rest of its session (Ray's agents may outlive the driver)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, output[-4000:]

    storage = R.sqlite_uri(study_dir / R.OPTUNA_DB)
    trials = {
        arm: optuna.load_study(study_name=f"{NAME}.{arm}.p0.2", storage=storage).get_trials() for arm in ("ms", "spl")
    }
    ms = [(t.state.name, t.user_attrs.get(R.OPTUNA_FAILURE)) for t in trials["ms"]]
    assert ms == [("FAIL", None), ("COMPLETE", None), ("COMPLETE", None)]  # the lost trial, then its replacement
    spl = [(t.state.name, t.user_attrs.get(R.OPTUNA_FAILURE)) for t in trials["spl"]]
    assert spl == [("FAIL", R.FAILURE_NONFINITE)] * TRIALS  # evaluated: not replaced
    assert "3 failed" in output  # Ray's count: the lost one and the two NaN ones

    status = subprocess.run(
        [sys.executable, "-m", "study.run", str(spec), "--status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    rows = {ln.split()[0]: ln.split() for ln in status.stdout.splitlines() if ln.startswith(("ms.", "spl."))}
    assert rows["ms.p0.2"][2:5] == ["2/2", "0", "1"]  # finished / budget, pruned, failed
    assert rows["spl.p0.2"][2:7] == ["0/2", "0", "2", "(2", "nan)"]

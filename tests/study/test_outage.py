"""Outages of the driver's stores ridden out (``study/outage.py``, ``study/guarded_stores.py``) against a real
PostgreSQL restarted by the test: Optuna's storage writes through a restart without losing or repeating a value, an
outage longer than ``tracking.outage_budget_s`` is one StoreOutageError, and a whole study (Ray Tune, OptunaSearch on
PostgreSQL) survives a restart mid-trial without ``--resume``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time

import optuna
import pytest
import yaml

from harness.driver import REPO, tiny_spec
from harness.postgres import postgres_server, postgres_unavailable_reason
from schema.errors import StoreOutageError
from study import outage
from study.guarded_stores import GuardedRDBStorage, optuna_store_name
from study.outage import is_transient

_reason = postgres_unavailable_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")


@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        server.create_database("optuna")
        yield server


def test_optuna_writes_ride_out_a_restart(pg, capsys):
    storage = GuardedRDBStorage(pg.url("optuna"))
    study = optuna.create_study(study_name="t_ride", storage=storage)
    trial = study.ask()
    restarter = threading.Thread(target=pg.restart, kwargs={"down_s": 3.0})
    restarter.start()
    time.sleep(0.5)  # the server is going down
    steps = list(range(20))
    for step in steps:  # every write goes through; some wait for the server to come back
        trial.report(float(step), step)
        time.sleep(0.25)
    restarter.join()
    study.tell(trial, 1.0)
    frozen = optuna.load_study(study_name="t_ride", storage=pg.url("optuna").replace("${PGTEST_PASSWORD}", pg.password))
    [done] = frozen.trials
    assert done.state.name == "COMPLETE" and sorted(done.intermediate_values) == steps
    err = capsys.readouterr().err
    name = optuna_store_name(storage._redacted_url)
    print(err)
    assert f"warning: {name} is unreachable" in err and f"{name} is back after" in err
    assert pg.password not in err
    assert outage.guard(name).outages and outage.guard(name).outages[-1] >= 2.0


def test_an_outage_longer_than_the_budget_is_one_error(pg):
    storage = GuardedRDBStorage(pg.url("optuna"))
    study = optuna.create_study(study_name="t_budget", storage=storage)
    trial = study.ask()
    outage.set_budget(2.0)
    pg.stop()
    try:
        started = time.monotonic()
        with pytest.raises(StoreOutageError, match=r"unreachable for \d+ s, longer than tracking.outage_budget_s"):
            trial.report(1.0, 1)
        assert 2.0 <= time.monotonic() - started < 30
    finally:
        outage.set_budget(outage.DEFAULT_BUDGET_S)
        pg.start()
    trial.report(1.0, 1)  # the store is back and the guard retries again


def test_what_is_transient():
    assert is_transient(ConnectionRefusedError(111, "Connection refused"))
    assert not is_transient(ValueError("Trial#3 has already finished and can not be updated."))
    assert not is_transient(OSError(28, "No space left on device"))


def test_a_study_rides_out_a_postgresql_restart_mid_trial(pg, tmp_path):
    """OptunaSearch's writes happen in the driver, at each epoch's report: the restart hits
    ``set_trial_intermediate_value``, where the driver used to die (issue 32)."""
    pg.create_database("optuna_study")
    spec = tiny_spec("t_pg_restart", epochs=6, num_trials=2, max_concurrent=2)
    spec["train"]["batches_per_epoch"] = 12  # epochs of a second or two: the outage spans reports
    spec["tracking"] = {"optuna_uri": pg.url("optuna_study")}
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": tempfile.mkdtemp(prefix="ro", dir="/tmp")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = pg.url("optuna_study").replace("${PGTEST_PASSWORD}", pg.password)
    try:
        started = time.monotonic()
        while not _reported(url, "t_pg_restart"):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() - started < 300, "no epoch was reported"
            time.sleep(0.3)
        pg.restart(down_s=8.0)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(err[-3000:])
    assert proc.returncode == 0, err[-3000:]
    assert "is unreachable" in err and "is back after" in err and "Traceback" not in err
    trials = optuna.load_study(study_name="t_pg_restart", storage=url).trials
    assert len(trials) == 2 and all(t.state.name == "COMPLETE" for t in trials)
    assert all(sorted(t.intermediate_values) == list(range(1, 7)) for t in trials)


def _reported(url: str, name: str) -> bool:
    try:
        study = optuna.load_study(study_name=name, storage=url)
    except KeyError:
        return False
    return any(t.intermediate_values for t in study.trials)

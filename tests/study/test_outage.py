"""Outages of the driver's stores ridden out (``study/tracking/outage.py``, ``study/tracking/guarded.py``) against a real
PostgreSQL restarted by the test: Optuna's storage writes through a restart without losing or repeating a value, an
outage longer than ``tracking.outage_budget_s`` is one StoreOutageError and the CLI's one line. A whole study riding
out a PostgreSQL restart (OptunaSearch's ``set_trial_intermediate_value`` in the driver, where it used to die) is
tests/study/test_deployment.py."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from harness.postgres import postgres_server, postgres_unavailable_reason
from study.tracking import outage
from study.tracking.guarded import GuardedRDBStorage, optuna_store_name
from study.tracking.outage import is_transient
from trainables.schema.errors import StoreOutageError

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


def test_the_cli_line_of_an_outage_past_its_budget():
    from study.runtime.store_errors import store_failure

    try:
        try:
            raise StoreOutageError("the Optuna store postgresql://u:***@db:5432/optuna has been unreachable for 301 s")
        except StoreOutageError as e:
            raise RuntimeError("Ray Tune's wrapper") from e
    except RuntimeError as wrapped:
        line = store_failure(wrapped, {"mlflow": "m", "optuna": "o", "storage": "s"})
    assert line == "the Optuna store postgresql://u:***@db:5432/optuna has been unreachable for 301 s"

"""Outages of the driver's stores ridden out (``study/tracking/outage.py``, ``study/tracking/guarded.py``) against a real
PostgreSQL restarted by the test: Optuna's storage writes through a restart without losing or repeating a value, an
outage longer than ``tracking.outage_budget_s`` is one StoreOutageError and the CLI's one line. A whole study riding
out a PostgreSQL restart (OptunaSearch's ``set_trial_intermediate_value`` in the driver, where it used to die) is
tests/study/runtime/test_deployment.py.

Only the tests that restart a real PostgreSQL skip where none can be started; the guard's own logic (retry, backoff,
budget, what counts as transient, the CLI's line) is tested on a fake clock and runs everywhere."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import optuna
import pytest

from harness.postgres import postgres_server, postgres_unavailable_reason
from study.tracking import outage
from study.tracking.guarded import GuardedRDBStorage, optuna_store_name
from study.tracking.outage import is_transient
from trainables.schema.errors import StoreOutageError

_reason = postgres_unavailable_reason()
needs_postgres = pytest.mark.skipif(_reason is not None, reason=f"needs a real PostgreSQL to restart: {_reason}")


@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        server.create_database("optuna")
        yield server


@needs_postgres
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


@needs_postgres
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
    assert is_transient(RuntimeError("terminating connection due to administrator command"))
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as e:
            raise RuntimeError("StorageInternalError: An exception is raised during the commit") from e
    except RuntimeError as wrapped:
        assert is_transient(wrapped)  # anywhere in the chain
    assert not is_transient(ValueError("Trial#3 has already finished and can not be updated."))
    assert not is_transient(OSError(28, "No space left on device"))


class _Clock:
    """A fake ``time`` for :mod:`study.tracking.outage`: ``sleep`` moves ``monotonic`` on, and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(
        outage, "time", SimpleNamespace(monotonic=lambda: fake.now, sleep=fake.sleep, strftime=time.strftime)
    )
    yield fake
    outage.set_budget(outage.DEFAULT_BUDGET_S)


def _flaky(clock: _Clock, failures: int, error: Exception):
    """A store call that takes 0.05 s and fails ``failures`` times with ``error``, then answers; ``calls`` counts
    the tries. (A call that took no time at all would keep the guard retrying at the budget's very end: it gives up
    only once the outage is *longer* than the budget, and its last wait is cut to what is left.)"""
    calls = []

    def call(value: str) -> str:
        clock.now += 0.05
        calls.append(value)
        if len(calls) <= failures:
            raise error
        return value

    return call, calls


def test_the_guard_retries_with_backoff_until_the_store_is_back(clock, capsys):
    outage.set_budget(300.0)
    call, calls = _flaky(clock, 8, ConnectionRefusedError(111, "Connection refused"))
    g = outage.OutageGuard("the Optuna store fake://pure-1")
    assert g.call(call, "answer") == "answer"
    assert len(calls) == 9
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]  # doubling from 0.5 s, capped at 10 s
    assert g.outages == [pytest.approx(45.5 + 8 * 0.05)] and g.down_since is None  # from the first failure's end
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2  # one line when the outage starts, one when it ends
    assert err[0].startswith("warning: the Optuna store fake://pure-1 is unreachable (connection refused)")
    assert err[1] == "the Optuna store fake://pure-1 is back after 45.9 s; the study goes on"


def test_the_guard_raises_a_non_transient_error_at_once(clock, capsys):
    call, calls = _flaky(clock, 1, ValueError("Trial#3 has already finished and can not be updated."))
    with pytest.raises(ValueError, match="already finished"):
        outage.OutageGuard("the Optuna store fake://pure-2").call(call, "x")
    assert len(calls) == 1 and clock.sleeps == [] and capsys.readouterr().err == ""


def test_the_guard_gives_up_past_the_budget(clock, capsys):
    outage.set_budget(20.0)
    call, calls = _flaky(clock, 10**6, ConnectionRefusedError(111, "Connection refused"))
    g = outage.OutageGuard("the MLflow store fake://pure-3")
    with pytest.raises(StoreOutageError) as e:
        g.call(call, "x")
    assert str(e.value).startswith(
        "the MLflow store fake://pure-3 has been unreachable for 20 s, longer than tracking.outage_budget_s (20 s;"
    )
    assert isinstance(e.value.__cause__, ConnectionRefusedError)
    # the waits never overshoot the budget: the last one is cut to what is left of it (20 - 15.5 - 5 calls' 0.05 s)
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, pytest.approx(4.25)]
    assert len(calls) == 7 and g.outages == []
    assert "is back" not in capsys.readouterr().err


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

"""A store outage at the moments a study's bookkeeping cannot retry around it (study/tracking/outage.py): after a
long outage the guard retries again, and a ``tell`` (COMPLETE or PRUNED) or a report the store refuses past its
budget ends the driver instead of being swallowed by Ray's ``OptunaSearch`` (which logs it as a warning and leaves the
trial RUNNING in Optuna while Ray and MLflow hold it as done). Pure: a local SQLite Optuna storage whose writes are
made to fail; the real PostgreSQL at these moments is tests/study/runtime/test_deployment.py and benchmarks/cluster_faults.py."""

from __future__ import annotations

import time

import optuna
import pytest

from study.runtime.compat import completed_trials_of, optuna_study_of, optuna_trials_of
from study.search.study_search import StudySearch
from study.tracking import outage
from study.tracking.guarded import GuardedRDBStorage
from study.tracking.outage import OutageEscape, guard, unwrapped
from trainables.schema.errors import StoreOutageError
from trainables.schema.metric_names import EPOCH

METRIC = "val/recall_at_1"


@pytest.fixture
def budget():
    outage.set_budget(0.3)
    yield 0.3
    outage.set_budget(outage.DEFAULT_BUDGET_S)


class Flaky:
    """A store call that fails with a refused connection ``fails`` times, then answers."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise ConnectionRefusedError(111, "Connection refused")
        return "ok"


def test_after_a_long_outage_a_later_blip_is_ridden_out(budget, capsys):
    g = guard("the test store a")
    with pytest.raises(StoreOutageError, match="longer than tracking.outage_budget_s"):
        g.call(Flaky(10**6))
    assert g.gave_up
    # Given up: another caller fails at once, not after a budget of its own.
    started = time.monotonic()
    with pytest.raises(StoreOutageError):
        g.call(Flaky(10**6))
    assert time.monotonic() - started < budget
    assert g.call(Flaky(0)) == "ok"  # the store answers again
    assert not g.gave_up
    blip = Flaky(1)
    assert g.call(blip) == "ok" and blip.calls == 2  # a one-call blip is retried, not an error
    assert "is back after" in capsys.readouterr().err


def _searcher(tmp_path, max_t: int = 3) -> StudySearch:
    return StudySearch(
        space={"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
        metric=METRIC,
        mode="max",
        study_name="t_moments",
        storage=GuardedRDBStorage(f"sqlite:///{tmp_path}/optuna.db"),
        max_t=max_t,
    )


def _fail_writes(monkeypatch, searcher: StudySearch, method: str) -> None:
    storage = optuna_study_of(searcher)._storage
    backend = getattr(storage, "_backend", storage)

    def refused(*args, **kwargs):
        raise StoreOutageError("the Optuna store sqlite:///x has been unreachable for 301 s")

    monkeypatch.setattr(backend, method, refused)


@pytest.mark.parametrize(("epochs", "state"), [(3, "COMPLETE"), (1, "PRUNED")])
def test_a_tell_past_the_budget_ends_the_driver_and_is_told_again(tmp_path, monkeypatch, epochs, state):
    search = _searcher(tmp_path)
    assert search.suggest("ray_0") is not None
    result = {METRIC: 0.5, EPOCH: epochs, "training_iteration": epochs}
    with monkeypatch.context() as m:
        _fail_writes(m, search, "set_trial_state_values")
        with pytest.raises(OutageEscape) as escape:  # past Ray's `except Exception`, which would swallow it
            search.on_trial_complete("ray_0", result)
        assert isinstance(escape.value.error, StoreOutageError)
    trial = optuna.load_study(study_name="t_moments", storage=f"sqlite:///{tmp_path}/optuna.db").trials[0]
    assert trial.state.name == "RUNNING"  # nothing was recorded as told
    assert "ray_0" not in completed_trials_of(search)
    search.on_trial_complete("ray_0", result)  # the resumed driver's completion tells it
    trial = optuna.load_study(study_name="t_moments", storage=f"sqlite:///{tmp_path}/optuna.db").trials[0]
    assert trial.state.name == state and trial.value == 0.5 and trial.intermediate_values == {epochs: 0.5}


def test_a_report_past_the_budget_ends_the_driver(tmp_path, monkeypatch):
    search = _searcher(tmp_path)
    search.suggest("ray_0")
    _fail_writes(monkeypatch, search, "set_trial_intermediate_value")
    with pytest.raises(OutageEscape):
        search.on_trial_result("ray_0", {METRIC: 0.5, EPOCH: 1, "training_iteration": 1})


def test_a_value_optuna_refuses_fails_the_trial_not_the_study(tmp_path):
    search = _searcher(tmp_path)
    search.suggest("ray_0")
    search.on_trial_complete("ray_0", {METRIC: float("nan"), EPOCH: 3, "training_iteration": 3})
    trial = optuna.load_study(study_name="t_moments", storage=f"sqlite:///{tmp_path}/optuna.db").trials[0]
    assert trial.state.name == "FAIL" and "ray_0" in completed_trials_of(search)
    assert set(optuna_trials_of(search)) == {"ray_0"}


def test_unwrapped_gives_the_one_line_error():
    error = StoreOutageError("the MLflow store http://127.0.0.1:1 has been unreachable for 301 s")

    def fit():
        raise OutageEscape(error)

    with pytest.raises(StoreOutageError) as raised:
        unwrapped(fit)
    assert raised.value is error


def test_a_trial_told_before_a_restart_is_not_told_twice(tmp_path):
    search = _searcher(tmp_path)
    search.suggest("ray_0")
    result = {METRIC: 0.5, EPOCH: 3, "training_iteration": 3}
    search.on_trial_complete("ray_0", result)
    completed_trials_of(search).discard("ray_0")  # the restored searcher's snapshot predates the tell
    search.on_trial_complete("ray_0", {**result, METRIC: 0.7})
    trial = optuna.load_study(study_name="t_moments", storage=f"sqlite:///{tmp_path}/optuna.db").trials[0]
    assert trial.state.name == "COMPLETE" and trial.value == 0.5


def test_a_write_refused_every_time_gives_up_though_the_calls_inside_it_answer(budget):
    """Optuna's storage calls its own guarded methods: their answers must not end the outage of the call that keeps
    failing (it would otherwise be retried forever, one "back" line every budget)."""
    g = guard("the test store b")

    def write() -> None:
        assert g.call(lambda: "read") == "read"  # the store answers this one
        raise ConnectionResetError(104, "Connection reset by peer")

    started = time.monotonic()
    with pytest.raises(StoreOutageError):
        g.call(write)
    assert time.monotonic() - started < 10 * budget and g.outages == []

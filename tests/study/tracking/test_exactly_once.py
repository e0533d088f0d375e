"""Writes retried after a lost answer are stored once (study/tracking/guarded.py, "Exactly once"): the commit reached
the store, the answer did not (a crash, a dropped connection), so the client saw an outage and retried. Played here
on real stores (SQLite for Optuna and MLflow) by letting the real write commit and then raising the connection error
a crash gives; each test fails with the blind retry (two trials, two runs, an "already finished" error). The same
faults played by a server crash are benchmarks/cluster_faults.py."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest
from mlflow import MlflowClient
from optuna.storages import RDBStorage

from study.tracking import outage
from study.tracking.callback import MlflowTrialCallback, ParentRun
from study.tracking.guarded import GuardedRDBStorage
from study.tracking.store import TrackingStore
from trainables.schema import record as R


@pytest.fixture(autouse=True)
def budget():
    outage.set_budget(30.0)
    yield
    outage.set_budget(outage.DEFAULT_BUDGET_S)


def commit_then_lose_the_answer(monkeypatch, cls: type, name: str, times: int = 1) -> list[int]:
    """``cls.name`` commits its write, then (the first ``times`` calls) raises what a crashed server gives."""
    original = getattr(cls, name)
    calls = [0]

    def lost(*args, **kwargs):
        result = original(*args, **kwargs)
        calls[0] += 1
        if calls[0] <= times:
            raise ConnectionResetError(104, "Connection reset by peer")
        return result

    monkeypatch.setattr(cls, name, lost)
    return calls


def test_a_new_optuna_trial_is_created_once(tmp_path, monkeypatch):
    storage = GuardedRDBStorage(f"sqlite:///{tmp_path}/optuna.db")
    study = optuna.create_study(study_name="t_once", storage=storage)
    study.ask()
    calls = commit_then_lose_the_answer(monkeypatch, RDBStorage, "_create_new_trial")
    trial = study.ask()
    assert calls[0] == 1  # committed once; the retry found it
    trials = optuna.load_study(study_name="t_once", storage=f"sqlite:///{tmp_path}/optuna.db").trials
    assert [t.number for t in trials] == [0, 1] and trial.number == 1


def test_a_tell_is_stored_once(tmp_path, monkeypatch):
    storage = GuardedRDBStorage(f"sqlite:///{tmp_path}/optuna.db")
    study = optuna.create_study(study_name="t_once", storage=storage)
    trial = study.ask()
    commit_then_lose_the_answer(monkeypatch, RDBStorage, "set_trial_state_values")
    study.tell(trial, 0.25)  # the retry finds it COMPLETE: no "already finished" error
    (stored,) = optuna.load_study(study_name="t_once", storage=f"sqlite:///{tmp_path}/optuna.db").trials
    assert stored.state.name == "COMPLETE" and stored.value == 0.25


def test_a_trial_run_the_parent_run_and_the_experiment_are_created_once(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    commit_then_lose_the_answer(monkeypatch, MlflowClient, "create_experiment")
    store = TrackingStore(uri, "t_once")
    commit_then_lose_the_answer(monkeypatch, MlflowClient, "create_run", times=2)
    parent = store.start_parent("t_once", {"a": 1}, {})
    callback = MlflowTrialCallback(
        ParentRun(uri, store.experiment_id, parent), lambda config: ({"x": 1}, {}), total_epochs=2
    )
    run_id = callback.run_id(SimpleNamespace(trial_id="ray_0", config={}))

    client = MlflowClient(uri)
    assert [e.name for e in client.search_experiments() if e.name != "Default"] == ["t_once"]
    runs = client.search_runs([store.experiment_id])
    roles = sorted(r.data.tags[R.ROLE_TAG] for r in runs)
    assert roles == sorted([R.ROLE_STUDY, R.ROLE_TRIAL]), roles
    (trial_run,) = [r for r in runs if r.data.tags[R.ROLE_TAG] == R.ROLE_TRIAL]
    assert trial_run.info.run_id == run_id and trial_run.data.params == {"x": "1"}

"""Helpers for tests that start, kill and resume study drivers (own RAY_TMPDIR each) and read them back."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
from mlflow import MlflowClient

from trainables.schema import record as R

REPO = Path(__file__).resolve().parents[1]


def tiny_spec(name: str, epochs: int, num_trials: int = 1, **search: object) -> dict:
    """A digits study small enough for a test: 4 batches per epoch, Recall@1 only, one searched parameter."""
    return {
        "name": name,
        "family": "ms",
        "dataset": {"name": "digits"},
        "train": {
            "epochs": epochs,
            "classes_per_batch": 5,
            "samples_per_class": 4,
            "batches_per_epoch": 4,
            "recall_at": [1],
        },
        "validation": {"kind": "none"},  # digits: too few classes for folds (test_selection.py covers them)
        "final": {"seeds": 0},
        "search": {
            "num_trials": num_trials,
            "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}},
            **search,
        },
    }


def tiny_table(name: str, epochs: int, batches_per_epoch: int, num_trials: int, seeds: int, **over: object) -> dict:
    """A digits table small enough for a test: ms (the reference) and spl, whose arm searches its learning rate, at
    20 % per-class noise (one cell each), ``num_trials`` random trials per cell, ``seeds`` final seeds; ``over``
    replaces top-level keys (``arms`` included)."""
    table: dict[str, object] = {
        "name": name,
        "reference": "ms",
        "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
        "train": {
            "epochs": epochs,
            "classes_per_batch": 5,
            "samples_per_class": 4,
            "batches_per_epoch": batches_per_epoch,
            "recall_at": [1],
        },
        "validation": {"kind": "none"},  # digits: too few classes for folds
        "search": {"num_trials": num_trials, "max_concurrent": 1, "sampler": {"type": "random", "seed": 0}},
        "final": {"seeds": seeds},
        "diagnostics": {"every": 0},
        "arms": {
            "ms": {"family": "ms", "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}}},
            "spl": {"family": "spl", "space": {"train.optimizer.lr": {"type": "float", "low": 1e-4, "high": 1e-3}}},
        },
        "cells": {"dataset.noise.ratio": [0.2]},
    }
    table.update(over)
    return table


def honest_spec(name: str = "t_honest", **over: object) -> dict:
    """A digits study with honest selection, small enough for a test: 2 class-disjoint folds of the 5 training
    classes (P = 2), 2 epochs of 3 batches, 2 trials, 2 final seeds."""
    spec: dict[str, object] = {
        "name": name,
        "family": "ms",
        "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
        "train": {
            "epochs": 2,
            "classes_per_batch": 2,
            "samples_per_class": 4,
            "batches_per_epoch": 3,
            "recall_at": [1],
        },
        "validation": {"kind": "kfold", "folds": 2},
        "final": {"seeds": 2},
        "search": {
            "num_trials": 2,
            "max_concurrent": 2,
            "sampler": {"type": "random", "seed": 0},
            "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}},
        },
    }
    spec.update(over)
    return spec


#: Set (to 1) only by the tests' ``on_warm_head`` fixture: then a driver a test starts keeps ``RAY_ADDRESS=warm``.
SESSION_HEAD_ENV = "DMLSTUDY_TEST_SESSION_HEAD"


def study_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a driver a test starts: no ``RAY_ADDRESS`` from the shell that runs the tests (a driver's default is
    its own private Ray), unless the test asked for the session's warm head."""
    if env.get(SESSION_HEAD_ENV) != "1":
        env.pop("RAY_ADDRESS", None)
    return env


def driver_env(ray_tmp: str, **extra: str) -> dict[str, str]:
    return study_env({**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), **extra})


def start_driver(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    """``python -m study.run ARGS`` in its own session, so the test can kill it and everything it started."""
    return subprocess.Popen(
        [sys.executable, "-m", "study.run", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def environ_of(pid: int) -> dict[str, str]:
    """The environment process ``pid`` started with (empty once it has exited, or when it is not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def ray_processes(ray_tmp: str) -> list[int]:
    """The processes started with ``RAY_TMPDIR=ray_tmp``: a test's driver and its private Ray (whose processes run in
    sessions of their own: study.runtime.compat.own_session_local_instance), and nothing of another test's."""
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [pid for pid in pids if pid != os.getpid() and environ_of(pid).get("RAY_TMPDIR") == ray_tmp]


def private_raylet(ray_tmp: str) -> int | None:
    """The raylet of the private Ray a test's driver started with ``RAY_TMPDIR=ray_tmp`` (``None`` before it runs)."""
    for pid in ray_processes(ray_tmp):
        try:
            program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if Path(program.decode(errors="replace")).name == "raylet":
            return pid
    return None


def kill_driver(proc: subprocess.Popen, ray_tmp: str | None = None) -> None:
    """SIGKILL the driver, then the rest of its session and every process of its private Ray instance (raylet, GCS,
    agents, workers: those of ``RAY_TMPDIR=ray_tmp``, by default the driver's own while it still runs)."""
    ray_tmp = ray_tmp or environ_of(proc.pid).get("RAY_TMPDIR")
    proc.kill()
    proc.wait()
    # Until every one of them is gone (at most the 1 s this waited before, whatever came): SIGKILL the session and the
    # private Ray's processes again on each look, one that a dying parent had just forked included.
    deadline = time.monotonic() + 1.0
    while True:
        left = _living_in_group(proc.pid) + (ray_processes(ray_tmp) if ray_tmp else [])
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _living_in_group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that are not zombies (a zombie has ended: only its parent, init here,
    has yet to reap it)."""
    living = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, _ppid, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(group) == pgid and state != "Z":
                living.append(int(entry.name))
    return living


def mlflow_children(study_dir: Path, name: str) -> tuple[MlflowClient, list, list]:
    client = MlflowClient(R.sqlite_uri(study_dir / R.MLFLOW_DB))
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    parents = [r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_STUDY]
    children = [r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_TRIAL]
    return client, parents, children


def _read_only_rows(db: Path, query: str, params: tuple = ()) -> list[tuple]:
    """The rows of ``query`` on the sqlite file ``db``, opened read-only (none while it does not exist, its tables are
    not created yet, or the writer holds it locked).

    A poller must read so: an MlflowClient would run its schema checks each time, and Optuna creates its tables when
    they are missing, so a poll that opened the store through Optuna while the driver created them made one of the two
    fail on Alembic's version row (``UNIQUE constraint failed: alembic_version.version_num``, seen in a driver in CI).
    """
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute(query, params).fetchall()
    except sqlite3.Error:
        return []


def count_in_mlflow(study_dir: Path, query: str, params: tuple = ()) -> int:
    """``SELECT count(*) ...`` on the study's sqlite MLflow store (0 while it cannot be read: :func:`_read_only_rows`)."""
    rows = _read_only_rows(study_dir / R.MLFLOW_DB, query, params)
    return int(rows[0][0]) if rows else 0


def logged_epochs(study_dir: Path, name: str) -> int:
    """Epochs logged so far over all trials of study ``name``."""
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM metrics m JOIN runs r ON m.run_uuid = r.run_uuid "
        "JOIN experiments e ON r.experiment_id = e.experiment_id "
        "WHERE m.key = 'test/recall_at_1' AND e.name = ? AND r.lifecycle_stage = 'active'",
        (name,),
    )


def optuna_states(study_dir: Path) -> dict[str, list[str]]:
    """Per Optuna study of the run, its trials' states in Optuna's order (``{}`` while the store cannot be read)."""
    rows = _read_only_rows(
        study_dir / R.OPTUNA_DB,
        "SELECT s.study_name, t.state FROM studies s LEFT JOIN trials t ON t.study_id = s.study_id "
        "ORDER BY s.study_name, t.number",
    )
    states: dict[str, list[str]] = {}
    for name, state in rows:
        states.setdefault(str(name), []).extend([] if state is None else [str(state)])
    return states


def final_groups_running(study_dir: Path) -> list[str]:
    """The group of every final-stage child run still RUNNING (the driver writes a run's start and end as Ray tells
    it, so this holds for a trial's whole life, unlike its folder, which Ray syncs to the storage now and then)."""
    rows = _read_only_rows(
        study_dir / R.MLFLOW_DB,
        "SELECT g.value FROM runs r JOIN tags s ON s.run_uuid = r.run_uuid JOIN tags g ON g.run_uuid = r.run_uuid "
        "WHERE s.key = ? AND s.value = ? AND g.key = ? AND r.status = 'RUNNING'",
        (R.STAGE, R.STAGE_FINAL, R.GROUP),
    )
    return [str(value) for (value,) in rows]


def final_runs_finished(study_dir: Path) -> int:
    """Final-stage child runs that ended FINISHED."""
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE t.key = 'stage' AND t.value = 'final' AND r.status = 'FINISHED'",
    )


def optuna_trials(study_dir: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=R.sqlite_uri(study_dir / R.OPTUNA_DB)).get_trials()

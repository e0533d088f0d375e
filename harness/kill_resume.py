"""Kill a study's driver at a chosen point, resume it, and check that nothing was lost or repeated.

Used by the stop-and-resume tests (``tests/study/test_resume.py``, ``tests/study/runtime/test_stop_signal.py`` and
others) and ``benchmarks/kill_resume.py`` (which repeats it at random points). A chain of stops in one study (a
SIGKILL, a resume stopped in turn, ...) is built from :func:`run_and_stop`, :func:`status_of` and :func:`run_to_end`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from harness.driver import (
    driver_env,
    kill_driver,
    logged_epochs,
    mlflow_children,
    optuna_trials,
    ray_processes,
    start_driver,
    tiny_spec,
)
from study.runtime.driver_run import read_run_progress
from study.runtime.stopping import EXIT_STOPPED
from trainables.schema import record as R

NUM_TRIALS, EPOCHS = 3, 3


def kill_spec(batches_per_epoch: int, name: str = "t_kill") -> dict:
    spec = tiny_spec(name, EPOCHS, NUM_TRIALS, max_concurrent=1, sampler={"type": "random", "seed": 1})
    spec["train"]["batches_per_epoch"] = batches_per_epoch
    return spec


def restarted_rows(study_dir: Path) -> list[tuple[str, int]]:
    """(trial, epoch) of every result a trial reported as the first after a restart past epoch 1."""
    rows = []
    for path in (study_dir / R.SEARCH_EXPERIMENT).glob("trial_*/result.json"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["iterations_since_restore"] == 1 and r["training_iteration"] > 1:
                rows.append((r["trial_id"], r["training_iteration"]))
    return rows


def snapshot_has_checkpointed_trial_in_flight(study_dir: Path) -> bool:
    """Whether Ray's latest experiment snapshot holds a RUNNING trial past epoch 1 but not finished."""
    states = sorted((study_dir / R.SEARCH_EXPERIMENT).glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
    try:
        trials = json.loads(states[-1].read_text())["trial_data"] if states else []
    except (OSError, ValueError):  # being rewritten
        return False
    for trial_json, meta_json in trials:
        last = json.loads(meta_json).get("last_result") or {}
        if json.loads(trial_json)["status"] == "RUNNING" and 1 <= last.get("training_iteration", 0) < EPOCHS:
            return True
    return False


#: How a test stops a running driver: ``stop(proc, ray_tmp)`` sends the signals (to the driver, its process group,
#: its private Ray's processes: :func:`harness.driver.ray_processes`).
Stop = Callable[[subprocess.Popen, str], None]


def signal_driver(sig: int) -> Stop:
    """Send ``sig`` to the driver alone (Slurm's ``--signal=B:USR1`` reaches it through the job script)."""
    return lambda proc, ray_tmp: proc.send_signal(sig)


def signal_group(sig: int, with_ray: bool = False) -> Stop:
    """Send ``sig`` to the driver's process group (Ctrl-C, ``timeout``); ``with_ray``: to every process of its
    private Ray too, at the same moment (Slurm's preemption and ``scancel --full`` signal every process of a job)."""

    def stop(proc: subprocess.Popen, ray_tmp: str) -> None:
        targets = [pid for pid in ray_processes(ray_tmp) if pid != proc.pid] if with_ray else []
        os.killpg(proc.pid, sig)
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    return stop


def run_and_stop(
    workdir: Path,
    env: dict[str, str],
    args: list[str],
    study_dir: Path,
    stop_when: Callable[[Path], bool],
    stop: Stop | None,
    *,
    extra_delay_s: float = 0.0,
    timeout: float = 300,
) -> dict:
    """Start ``python -m study.run ARGS`` (own session, ``env``), and once ``stop_when(study_dir)`` holds (plus a
    delay) ``stop`` it and wait for it to exit by itself (``stop=None``: SIGKILL it and its Ray). Whatever of it is
    still alive afterwards is killed. Returns ``finished_before_kill``, ``code`` (``None``: killed, or it did not
    stop within ``timeout``), ``output`` and ``stop_s`` (seconds from the stop to the exit)."""
    proc = start_driver(workdir, env, *args)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and not stop_when(study_dir):
        assert time.monotonic() < deadline, "the study did not reach the kill point"
        time.sleep(0.2)
    time.sleep(extra_delay_s)
    finished_before_kill = proc.poll() is not None
    code, stop_s = None, None
    if stop is not None and not finished_before_kill:
        sent = time.monotonic()
        stop(proc, env["RAY_TMPDIR"])
        try:
            code = proc.wait(timeout)
            stop_s = time.monotonic() - sent
        except subprocess.TimeoutExpired:
            code = None  # it did not stop: the checker says so
    kill_driver(proc, env["RAY_TMPDIR"])
    output = proc.stdout.read() if proc.stdout else ""
    return {"finished_before_kill": finished_before_kill, "code": code, "output": output, "stop_s": stop_s}


def continue_args(output: str) -> list[str]:
    """The arguments of ``python -m study.run`` that a stopped driver's last line says continue it
    (``...: continue it with: python -m study.run ARGS``)."""
    line = output.strip().splitlines()[-1]
    marker = "continue it with: "
    assert marker in line, line
    words = shlex.split(line.split(marker, 1)[1])
    assert words[:3] == ["python", "-m", "study.run"], words
    return words[3:]


def status_of(workdir: Path, env: dict[str, str], args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m study.status ARGS`` (a process of several seconds: only for a test that reads it)."""
    return subprocess.run(
        [sys.executable, "-m", "study.status", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=120
    )


def run_to_end(
    workdir: Path, env: dict[str, str], args: list[str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python -m study.run ARGS`` to its end (a resume: the arguments :func:`continue_args` read, or ``--resume``);
    the default ``timeout`` is generous, for a test sharing 2 loaded cores (pytest's own per-test limit still holds)."""
    return subprocess.run(
        [sys.executable, "-m", "study.run", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runs_left(study_dir: Path, name: str) -> dict:
    """Where a stopped study's stores stand: the parent run's (status, stage), its children's and Optuna's states."""
    _, parents, children = mlflow_children(study_dir, name)
    return {
        "parent": [(p.info.status, p.data.tags.get(R.STAGE)) for p in parents],
        "children": sorted(c.info.status for c in children),
        "optuna": sorted(t.state.name for t in optuna_trials(study_dir, name)),
    }


def leave_checkpoints_as_ray_does(study_dir: Path) -> list[tuple[str, int]]:
    """Leave a SIGKILLed study as Ray's checkpoint window does (Ray issue 30073,
    :mod:`study.runtime.checkpoint_repair`): every trial RUNNING in the snapshot, with the checkpoint its snapshot
    names (epoch e), has that checkpoint moved one index up, as if Ray had registered a newer one and deleted it (a
    copy: the newer one holds epoch e, whose result MLflow has, as Ray logs a result before it registers its
    checkpoint). A folder the worker wrote past it, whose result the driver never saw, is deleted. Returns, per trial
    moved, (trial id, e): ``--resume`` should train it on from epoch e + 1."""
    tune_dir = study_dir / R.SEARCH_EXPERIMENT
    state = max(tune_dir.glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
    done = []
    for trial_json, metadata_json in json.loads(state.read_text())["trial_data"]:
        trial, last = json.loads(trial_json), json.loads(metadata_json).get("last_result") or {}
        if trial["status"] != "RUNNING" or not last.get("checkpoint_dir_name"):
            continue
        folder = tune_dir / R.trial_dir(trial["trial_id"])
        named = folder / last["checkpoint_dir_name"]
        newer = named.with_name(f"checkpoint_{int(named.name.split('_')[1]) + 1:06d}")
        for past in folder.glob("checkpoint_*"):
            if past.name > named.name:
                shutil.rmtree(past)
        shutil.copytree(named, newer)
        shutil.rmtree(named)
        done.append((trial["trial_id"], int(last["training_iteration"])))
    return done


def trial_rows(study_dir: Path, trial_id: str) -> list[dict]:
    """Every result Ray wrote for search trial ``trial_id`` (its ``result.json``), in order."""
    path = study_dir / R.SEARCH_EXPERIMENT / R.trial_dir(trial_id) / "result.json"
    return [json.loads(line) for line in path.read_text().splitlines()]


def kill_then_resume(
    workdir: Path,
    spec: dict,
    kill_when: Callable[[Path], bool],
    *,
    extra_delay_s: float = 0.0,
    timeout: float = 300,
    resume_args: tuple[str, ...] = (),
    stop_signal: int | None = None,
    stop: Stop | None = None,
    storage: Path | None = None,
    between: Callable[[Path], object] | None = None,
    status: bool = True,
) -> dict:
    """Start ``spec``'s study, SIGKILL its driver (and its Ray) once ``kill_when(study_dir)`` holds (plus a delay),
    run ``study.status``, then ``--resume`` it; return what a checker needs.

    With ``stop_signal`` (``SIGUSR1``, ``SIGTERM``) the driver is sent that signal instead, or with ``stop`` stopped
    that way (:func:`signal_group`), and left to stop by itself (``first_code`` is its exit code, ``stop_s`` the
    seconds it took); whatever of it is still alive after it exited is then killed. It is then resumed with the
    command its last line printed. With ``storage``, every command carries ``--set storage=STORAGE``; ``between(study_dir)``
    looks at the study between the two drivers (returned as ``between``), and so does ``study.status`` (returned as
    ``status``; ``status=False``: not run, ``None``, for a test that does not read it: a process of several seconds)."""
    path = workdir / R.SPEC_FILE
    path.write_text(yaml.safe_dump(spec))
    study_dir = (storage or workdir / R.DEFAULT_STORAGE) / spec["name"]
    located = ["--set", f"storage={storage}"] if storage is not None else []
    stop = stop or (signal_driver(stop_signal) if stop_signal is not None else None)
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        first = run_and_stop(
            workdir,
            env,
            [str(path), *located],
            study_dir,
            kill_when,
            stop,
            extra_delay_s=extra_delay_s,
            timeout=timeout,
        )
        epochs_at_kill = logged_epochs(study_dir, spec["name"])
        progress = read_run_progress(study_dir)
        seen = between(study_dir) if between is not None else None
        shown = status_of(workdir, env, [str(path), *located]) if status else None
        # A driver that stopped by itself said what continues it: that command, as printed.
        args = continue_args(first["output"]) if first["code"] == EXIT_STOPPED else [str(path), *located, "--resume"]
        resumed = run_to_end(workdir, env, [*args, *resume_args], timeout)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return {
        "resumed": resumed,
        "study_dir": study_dir,
        "name": spec["name"],
        "epochs_at_kill": epochs_at_kill,
        "finished_before_kill": first["finished_before_kill"],
        "first_code": first["code"],
        "first_output": first["output"],
        "stop_s": first["stop_s"],
        "progress": progress,
        "between": seen,
        "status": shown,
    }


def kill_and_resume(
    workdir: Path,
    kill_after_epochs: int,
    extra_delay_s: float = 0.0,
    batches_per_epoch: int = 4,
    timeout: float = 300,
    in_flight: bool = False,
) -> dict:
    """The digits study of :func:`kill_spec`, killed once ``kill_after_epochs`` epochs are in MLflow and, with
    ``in_flight``, once Ray's snapshot holds a checkpointed trial in flight. Used by
    ``benchmarks/kill_resume.py``."""
    spec = kill_spec(batches_per_epoch)

    def reached(study_dir: Path) -> bool:
        return logged_epochs(study_dir, spec["name"]) >= kill_after_epochs and (
            not in_flight or snapshot_has_checkpointed_trial_in_flight(study_dir)
        )

    return kill_then_resume(workdir, spec, reached, extra_delay_s=extra_delay_s, timeout=timeout)


def check_resumed(out: dict, objective: str = "test/recall_at_1") -> None:
    """Exactly N trials in Ray, Optuna and MLflow; one child run each; continuous per-epoch histories; each Optuna
    value the last logged ``objective`` of a run (what ranks a trial: ``search.objective``)."""
    resumed, study_dir, name = out["resumed"], out["study_dir"], out["name"]
    assert resumed.returncode == 0, out["first_output"][-2000:] + resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert f"{NUM_TRIALS} trials (0 failed)" in resumed.stdout
    states = sorted(t.state.name for t in optuna_trials(study_dir, name))
    assert states == ["COMPLETE"] * NUM_TRIALS, states
    client, parents, children = mlflow_children(study_dir, name)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == NUM_TRIALS
    assert len({r.data.tags["trial_id"] for r in children}) == NUM_TRIALS
    for run in children:
        assert run.info.status == "FINISHED", run.info
        for metric in ("test/recall_at_1", "train/loss"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
            assert sorted(steps) == list(range(1, EPOCHS + 1)), (metric, steps)
    optuna_values = sorted(float(t.value) for t in optuna_trials(study_dir, name) if t.value is not None)
    assert optuna_values == pytest.approx(sorted(r.data.metrics[objective] for r in children))

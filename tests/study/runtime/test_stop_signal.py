"""A stop signal (a batch job's time limit: ``SIGUSR1``; a preemption: ``SIGTERM``; Ctrl-C: ``SIGINT`` to the process
group) at each moment of a study, the worst ones included: the driver exits 3 with nothing half-written, its runs KILLED
(never FAILED), its progress written (``run_progress.json``), and the command its last line prints (``--set``
overrides and all) ends the study with every trial and every epoch once. ``tests/study/deploy/test_slurm.py`` runs the same
through Slurm's own signal and requeue."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.driver import count_in_mlflow, driver_env, logged_epochs, mlflow_children, optuna_trials
from harness.kill_resume import (
    EPOCHS,
    NUM_TRIALS,
    continue_args,
    kill_spec,
    run_and_stop,
    run_to_end,
    runs_left,
    signal_driver,
    signal_group,
)
from study.runtime.driver_run import read_run_progress
from study.runtime.stopping import EXIT_STOPPED
from trainables.schema import record as R

FINAL_SEEDS = 2
#: Seconds one driver of a chain may take to reach its stop (or to stop): generous, for 2 cores shared with another
#: test (pytest's per-test limit, 900 s, still bounds the whole chain).
DRIVER_S = 600


def _final_runs(study_dir: Path) -> int:
    """Final-stage child runs created so far (any status)."""
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM tags t WHERE t.key = ? AND t.value = ?",
        (R.STAGE, R.STAGE_FINAL),
    )


def _killed_not_done(left: dict, stage: str = R.STAGE_SEARCH) -> None:
    """A stopped study: its parent run KILLED in ``stage`` and not "done", no run FAILED or left RUNNING."""
    assert left["parent"] == [("KILLED", stage)], left
    assert set(left["children"]) <= {"FINISHED", "KILLED"}, left


def _stopped(run: dict, signal_name: str) -> str:
    """A driver stopped by ``signal_name`` with exit 3, not ended before it; its output."""
    out = run["output"]
    assert not run["finished_before_kill"], "the study ended before the signal: " + out[-2000:]
    assert run["code"] == EXIT_STOPPED, out[-3000:]
    assert f"{signal_name} received" in out and "continue it with: " in out and "--resume" in out, out[-3000:]
    return out


@pytest.mark.e2e
def test_ctrl_c_then_a_preemption_of_every_process_then_sigterm_in_the_final_stage_each_printed_command_continues(
    tmp_path,
):
    # One study (2 final seeds), four drivers, each continued with the command the last one printed:
    # 1. Ctrl-C (SIGINT to the driver's process group) with the first trial mid-way: the private Ray runs in sessions
    #    of its own, so it is still there to save the study (S5).
    # 2. In the run that continues it, a preemption as Slurm does it (SIGTERM to the driver's group and to every
    #    process of its Ray at once) with the second trial mid-way: the driver does not wait Ray's minute for its GCS,
    #    exits 3 and writes its progress (S8).
    # 3. In the run that continues that one, SIGTERM while the best configuration is being retrained: the final stage
    #    stops like the search (S14).
    # 4. The last command continues Ray's final experiment to the end: no final run twice, none lost, every epoch once.
    spec = kill_spec(160, name="t_stop_chain")
    spec["final"] = {"seeds": FINAL_SEEDS}
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(spec))
    name, study_dir = spec["name"], tmp_path / R.DEFAULT_STORAGE / spec["name"]
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        first = run_and_stop(
            tmp_path,
            env,
            [str(path)],
            study_dir,
            lambda d: logged_epochs(d, name) >= 1,
            signal_group(signal.SIGINT),
            timeout=DRIVER_S,
        )
        out = _stopped(first, "SIGINT")
        assert "went away" not in out, out[-3000:]
        _killed_not_done(runs_left(study_dir, name))
        second = run_and_stop(
            tmp_path,
            env,
            continue_args(out),
            study_dir,
            lambda d: logged_epochs(d, name) >= EPOCHS + 2,
            signal_group(signal.SIGTERM, with_ray=True),
            timeout=DRIVER_S,
        )
        out = _stopped(second, "SIGTERM")
        # Whichever watch sees the preemption first ends the driver at once: Ray's GCS gone (probed every second), or
        # the private node's raylet or GCS exited (polled every half second).
        assert "went away during the stop" in out or "private Ray node died (" in out, out[-3000:]
        _killed_not_done(runs_left(study_dir, name))
        progress = read_run_progress(study_dir)
        assert progress is not None and (progress.exit_code, progress.stopped_on) == (EXIT_STOPPED, "SIGTERM")
        third = run_and_stop(
            tmp_path,
            env,
            continue_args(out),
            study_dir,
            lambda d: _final_runs(d) >= 1,
            signal_driver(signal.SIGTERM),
            timeout=DRIVER_S,
        )
        out = _stopped(third, "SIGTERM")
        assert "stopped on SIGTERM in its final stage" in out, out[-3000:]
        left = runs_left(study_dir, name)
        _killed_not_done(left, R.STAGE_FINAL)
        assert left["optuna"] == ["COMPLETE"] * NUM_TRIALS, left  # the search had ended
        print(
            f"signal to exit: Ctrl-C {first['stop_s']:.1f} s, SIGTERM to every process {second['stop_s']:.1f} s, "
            f"SIGTERM in the final stage {third['stop_s']:.1f} s"
        )
        resumed = run_to_end(tmp_path, env, continue_args(out))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert sorted(t.state.name for t in optuna_trials(study_dir, name)) == ["COMPLETE"] * NUM_TRIALS
    client, parents, children = mlflow_children(study_dir, name)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    final = [r for r in children if r.data.tags.get(R.STAGE) == R.STAGE_FINAL]
    search = [r for r in children if r.data.tags.get(R.STAGE) == R.STAGE_SEARCH]
    assert len(search) == NUM_TRIALS and len(final) == FINAL_SEEDS, (len(search), len(final))
    for run in children:
        assert run.info.status == "FINISHED", run.info
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1")]
        assert sorted(steps) == list(range(1, EPOCHS + 1)), (run.data.tags.get(R.STAGE), steps)
    # Each search trial's Optuna value is the last Recall@1 its run logged, across the three drivers that trained it.
    values = sorted(float(t.value) for t in optuna_trials(study_dir, name))
    assert values == pytest.approx(sorted(r.data.metrics["test/recall_at_1"] for r in search))


@pytest.mark.e2e
def test_a_second_ctrl_c_stops_without_finishing_the_epoch_and_resume_finishes(tmp_path):
    # Ctrl-C, then Ctrl-C again half a second later, right after the trial logged its first epoch of ~10 s: the driver
    # exits 3 well before that epoch could end (the trial's actor is ended; before: Tune's cleanup let it train the
    # epoch, 11.5 s from the second Ctrl-C to the exit, against 1.9 s now), and --resume trains epoch 2, the last, once
    # (2 epochs: one to wait for, one in flight at the stop).
    spec = kill_spec(1500, name="t_ctrl_c_twice")
    spec["search"]["num_trials"] = 1
    epochs = spec["train"]["epochs"] = 2
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(spec))
    name, study_dir = spec["name"], tmp_path / R.DEFAULT_STORAGE / spec["name"]
    gap_s = 0.5

    def twice(proc: subprocess.Popen, ray_tmp: str) -> None:
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(gap_s)
        os.killpg(proc.pid, signal.SIGINT)

    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        first = run_and_stop(tmp_path, env, [str(path)], study_dir, lambda d: logged_epochs(d, name) >= 1, twice)
        out = first["output"]
        assert not first["finished_before_kill"] and first["code"] == EXIT_STOPPED, out[-3000:]
        assert "SIGINT received again: stopping without waiting for the running trials" in out, out[-3000:]
        progress = read_run_progress(study_dir)
        assert progress is not None and progress.epoch_s is not None, progress
        after_second = first["stop_s"] - gap_s
        print(f"second Ctrl-C to exit {after_second:.1f} s; an epoch takes {progress.epoch_s:.1f} s")
        assert after_second < progress.epoch_s / 2, (after_second, progress.epoch_s)
        assert logged_epochs(study_dir, name) == 1  # the epoch in flight was not finished
        resumed = run_to_end(tmp_path, env, continue_args(out))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    client, _, children = mlflow_children(study_dir, name)
    assert [c.info.status for c in children] == ["FINISHED"]
    steps = [m.step for m in client.get_metric_history(children[0].info.run_id, "test/recall_at_1")]
    assert steps == list(range(1, epochs + 1)), steps


#: ``python -m study.run SPEC`` with the signal already received when ``main`` begins (the handler recorded it).
_SIGNAL_FIRST = (
    "import os, signal, sys\n"
    "from study.commands import run\n"
    "from study.runtime import stopping\n"
    "stopping.install()\n"
    "os.kill(os.getpid(), signal.SIGUSR1)\n"
    "sys.exit(run.main(sys.argv[1:]))\n"
)


def test_a_signal_before_the_study_starts_writes_nothing(tmp_path):
    # SIGUSR1 while the driver is still importing and checking its inputs: exit 3, no study directory, so the job
    # script's next run starts the study afresh rather than --resume-ing one that never began; the driver says to run
    # the same command again (its overrides included), not --resume.
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(kill_spec(4, name="t_stop_early")))
    env = driver_env(str(tmp_path / "ray"))
    storage = tmp_path / "my runs"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_FIRST, str(path), "--set", f"storage={storage}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_STOPPED, output[-2000:]
    again = shlex.join([str(path), "--set", f"storage={storage}"])
    assert output.strip().splitlines()[-1] == (
        "stopped on SIGUSR1 before the study started; nothing was started: run the same command again: "
        f"python -m study.run {again}"
    )
    assert not storage.exists() and not (tmp_path / R.DEFAULT_STORAGE).exists()

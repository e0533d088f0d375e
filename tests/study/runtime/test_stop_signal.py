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

import numpy as np
import pytest
import yaml

from harness.driver import count_in_mlflow, driver_env, logged_epochs, mlflow_children, optuna_trials
from harness.kill_resume import (
    EPOCHS,
    NUM_TRIALS,
    check_resumed,
    continue_args,
    kill_spec,
    kill_then_resume,
    run_and_stop,
    signal_group,
)
from study.runtime.run_progress import read_run_progress
from study.runtime.stopping import EXIT_STOPPED
from trainables.schema import record as R

FINAL_SEEDS = 2


def _final_runs(study_dir: Path) -> int:
    """Final-stage child runs created so far (any status)."""
    return count_in_mlflow(
        study_dir,
        "SELECT count(*) FROM tags t WHERE t.key = ? AND t.value = ?",
        (R.STAGE, R.STAGE_FINAL),
    )


def _stopped_cleanly(out: dict) -> None:
    """The first driver stopped by itself with exit 3, saying how to continue, and left no run FAILED."""
    assert not out["finished_before_kill"], "the study ended before the signal"
    assert out["first_code"] == EXIT_STOPPED, out["first_output"][-3000:]
    assert "continue" in out["first_output"] and "--resume" in out["first_output"]


def _runs_left(study_dir: Path, name: str) -> dict:
    """Where a stopped study's stores stand: the parent run's (status, stage), its children's and Optuna's states."""
    _, parents, children = mlflow_children(study_dir, name)
    return {
        "parent": [(p.info.status, p.data.tags.get(R.STAGE)) for p in parents],
        "children": sorted(c.info.status for c in children),
        "optuna": sorted(t.state.name for t in optuna_trials(study_dir, name)),
    }


def _continue(workdir: Path, env: dict[str, str], output: str) -> subprocess.CompletedProcess[str]:
    """Run the command a stopped driver's last line printed (its ``--resume`` line), to the end."""
    return subprocess.run(
        [sys.executable, "-m", "study.run", *continue_args(output)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _killed_not_done(left: dict) -> None:
    """A stopped study: its parent run KILLED and not "done", no run FAILED or left RUNNING."""
    assert left["parent"] == [("KILLED", R.STAGE_SEARCH)], left
    assert set(left["children"]) <= {"FINISHED", "KILLED"}, left


@pytest.mark.e2e
def test_sigterm_in_the_final_stage_then_resume_finishes(tmp_path):
    # Preemption while the best configuration is being retrained: the final stage stops like the search, and
    # --resume continues Ray's final experiment (no final run twice, none lost).
    spec = kill_spec(160, name="t_stop_final")
    spec["final"] = {"seeds": FINAL_SEEDS}
    out = kill_then_resume(tmp_path, spec, lambda d: _final_runs(d) >= 1, stop_signal=signal.SIGTERM, status=False)
    _stopped_cleanly(out)
    assert "SIGTERM received" in out["first_output"]
    study_dir, name = out["study_dir"], spec["name"]
    resumed = out["resumed"]
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


@pytest.mark.e2e
def test_sigusr1_once_every_trial_exists_is_no_result_and_resume_finishes(tmp_path):
    # The worst moment for counting trials: all of them exist (the last one at epoch 1 of 3) and final.seeds is 0, so
    # only Tune's own state of each trial says the study is not done. The signal stops new trials (none is left to
    # start here), the running one reaches its next checkpoint, and the driver exits 3. The study lives where
    # --set storage= puts it, so the command the driver prints (kill_then_resume resumes with it) must carry it.
    spec = kill_spec(160, name="t_stop_last")
    # Ranked on the mean of the last 2 epochs (search.select_on): the stopped trial's history goes through its
    # checkpoint, so after --resume every trial's Optuna value is the mean of its own last 2 logged epochs.
    spec["search"]["select_on"] = {"mean_last": 2}
    storage = tmp_path / "elsewhere"
    out = kill_then_resume(
        tmp_path,
        spec,
        lambda d: logged_epochs(d, spec["name"]) >= (NUM_TRIALS - 1) * EPOCHS + 1,
        stop_signal=signal.SIGUSR1,
        storage=storage,
        between=lambda d: _runs_left(d, spec["name"]),
    )
    _stopped_cleanly(out)
    first = out["first_output"]
    assert "SIGUSR1 received" in first and out["epochs_at_kill"] < NUM_TRIALS * EPOCHS
    # Between the two drivers the study says where it stands, starting nothing.
    assert out["status"].returncode == 0 and f"of {NUM_TRIALS}" in out["status"].stdout, out["status"]
    assert "Best trial" not in first and "stopped on SIGUSR1 in its search stage" in first, first[-3000:]
    assert f"{NUM_TRIALS - 1} of {NUM_TRIALS} trials ended (0 failed), 1 stopped mid-way; no result yet" in first
    located = shlex.join([str(tmp_path / R.SPEC_FILE), "--set", f"storage={storage}"])
    assert first.strip().splitlines()[-1] == (
        f"stopped on SIGUSR1; continue it with: python -m study.run {located} --resume"
    )
    left = out["between"]
    _killed_not_done(left)
    assert left["children"] == ["FINISHED"] * (NUM_TRIALS - 1) + ["KILLED"], left
    assert left["optuna"] == ["COMPLETE"] * (NUM_TRIALS - 1) + ["RUNNING"], left  # the last one continues
    # The run's progress: every epoch it checkpointed (the stop's drained one included), timed, and how it ended.
    progress = out["progress"]
    assert progress is not None and (progress.exit_code, progress.stopped_on) == (EXIT_STOPPED, "SIGUSR1")
    assert (NUM_TRIALS - 1) * EPOCHS + 1 <= progress.epochs_checkpointed < NUM_TRIALS * EPOCHS, progress
    assert progress.startup_s is not None and 0 < progress.startup_s < progress.run_s, progress
    assert progress.epoch_s is not None and progress.epoch_s > 0, progress
    check_resumed(out, "test/mean_last_2/recall_at_1")  # exit 0, each trial COMPLETE once, epochs 1..EPOCHS once
    resumed = read_run_progress(out["study_dir"])
    assert resumed is not None and (resumed.exit_code, resumed.stopped_on) == (0, None), resumed
    assert resumed.epochs_checkpointed >= 1, resumed
    client, _, children = mlflow_children(out["study_dir"], spec["name"])
    history = [
        sorted(client.get_metric_history(c.info.run_id, "test/recall_at_1"), key=lambda m: m.step) for c in children
    ]
    means = sorted(np.mean([m.value for m in h[-2:]]) for h in history)
    ranked = sorted(t.value for t in optuna_trials(out["study_dir"], spec["name"]))
    assert ranked == pytest.approx(means, abs=1e-9), (ranked, means)


@pytest.mark.e2e
def test_ctrl_c_then_a_preemption_of_every_process_exit_3_and_resume_finishes(tmp_path):
    # Ctrl-C (SIGINT to the driver's process group) with the first trial mid-way: the private Ray runs in sessions of
    # its own, so it is still there to save the study. Then, in the run that continues it, a preemption as Slurm
    # does it (SIGTERM to the driver's group and to every process of its Ray at once) with the second trial mid-way:
    # the driver does not wait Ray's minute for its GCS, exits 3 and writes its progress. The third run finishes.
    spec = kill_spec(160, name="t_stop_group")
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(spec))
    name, study_dir = spec["name"], tmp_path / R.DEFAULT_STORAGE / spec["name"]
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")
    try:
        env = driver_env(ray_tmp)
        first = run_and_stop(
            tmp_path, env, [str(path)], study_dir, lambda d: logged_epochs(d, name) >= 1, signal_group(signal.SIGINT)
        )
        out = first["output"]
        assert not first["finished_before_kill"] and first["code"] == EXIT_STOPPED, out[-3000:]
        assert "SIGINT received" in out and "went away" not in out, out[-3000:]
        _killed_not_done(_runs_left(study_dir, name))
        second = run_and_stop(
            tmp_path,
            env,
            continue_args(out),
            study_dir,
            lambda d: logged_epochs(d, name) >= EPOCHS + 2,
            signal_group(signal.SIGTERM, with_ray=True),
        )
        out = second["output"]
        assert not second["finished_before_kill"] and second["code"] == EXIT_STOPPED, out[-3000:]
        assert "SIGTERM received" in out and "went away during the stop" in out, out[-3000:]
        _killed_not_done(_runs_left(study_dir, name))
        progress = read_run_progress(study_dir)
        assert progress is not None and (progress.exit_code, progress.stopped_on) == (EXIT_STOPPED, "SIGTERM")
        print(f"signal to exit: Ctrl-C {first['stop_s']:.1f} s, SIGTERM to every process {second['stop_s']:.1f} s")
        resumed = _continue(tmp_path, env, out)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    check_resumed({"resumed": resumed, "study_dir": study_dir, "name": name, "first_output": out})


@pytest.mark.e2e
def test_a_second_ctrl_c_stops_without_finishing_the_epoch_and_resume_finishes(tmp_path):
    # Ctrl-C, then Ctrl-C again half a second later, right after the trial logged its first epoch of ~10 s: the driver
    # exits 3 well before that epoch could end (the trial's actor is ended; before: Tune's cleanup let it train the
    # epoch, 11.5 s from the second Ctrl-C to the exit, against 1.9 s now), and --resume trains epochs 2 and 3 once.
    spec = kill_spec(1500, name="t_ctrl_c_twice")
    spec["search"]["num_trials"] = 1
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
        resumed = _continue(tmp_path, env, out)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    client, _, children = mlflow_children(study_dir, name)
    assert [c.info.status for c in children] == ["FINISHED"]
    steps = [m.step for m in client.get_metric_history(children[0].info.run_id, "test/recall_at_1")]
    assert steps == list(range(1, EPOCHS + 1)), steps


#: ``python -m study.run SPEC`` with the signal already received when ``main`` begins (the handler recorded it).
_SIGNAL_FIRST = (
    "import os, signal, sys\n"
    "from study import run\n"
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

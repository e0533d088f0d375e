"""A stop signal (a batch job's time limit: ``SIGUSR1``; a preemption: ``SIGTERM``) at each moment of a study: the
driver exits 3 with nothing half-written, its runs KILLED (never FAILED), and ``--resume`` ends the study with every
trial and every epoch once. ``tests/study/test_slurm.py`` runs the same through Slurm's own signal and requeue."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.driver import count_in_mlflow, driver_env, logged_epochs, mlflow_children, optuna_trials
from harness.kill_resume import EPOCHS, NUM_TRIALS, check_resumed, kill_spec, kill_then_resume
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


@pytest.mark.e2e
def test_sigusr1_mid_search_drains_then_resume_finishes(tmp_path):
    # The second trial in flight (epochs of ~1 s): the signal stops new trials, the running one reaches its next
    # checkpoint, and the driver exits 3; --resume runs the rest.
    spec = kill_spec(160, name="t_stop_search")
    out = kill_then_resume(
        tmp_path,
        spec,
        lambda d: logged_epochs(d, spec["name"]) >= EPOCHS + 1,
        stop_signal=signal.SIGUSR1,
    )
    _stopped_cleanly(out)
    assert "SIGUSR1 received" in out["first_output"]
    assert EPOCHS + 1 <= out["epochs_at_kill"] < NUM_TRIALS * EPOCHS
    # Between the two drivers the study says where it stands, starting nothing.
    assert out["status"].returncode == 0 and f"of {NUM_TRIALS}" in out["status"].stdout
    check_resumed(out)  # each trial COMPLETE once, one MLflow run each, epochs 1..EPOCHS once, parent FINISHED


@pytest.mark.e2e
def test_sigterm_in_the_final_stage_then_resume_finishes(tmp_path):
    # Preemption while the best configuration is being retrained: the final stage stops like the search, and
    # --resume continues Ray's final experiment (no final run twice, none lost).
    spec = kill_spec(160, name="t_stop_final")
    spec["final"] = {"seeds": FINAL_SEEDS}
    out = kill_then_resume(tmp_path, spec, lambda d: _final_runs(d) >= 1, stop_signal=signal.SIGTERM)
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
    # script's next run starts the study afresh rather than --resume-ing one that never began.
    path = tmp_path / R.SPEC_FILE
    path.write_text(yaml.safe_dump(kill_spec(4, name="t_stop_early")))
    env = driver_env(str(tmp_path / "ray"))
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_FIRST, str(path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_STOPPED, output[-2000:]
    assert "before the study started" in output and "--resume" in output
    assert not (tmp_path / R.DEFAULT_STORAGE / "t_stop_early").exists()

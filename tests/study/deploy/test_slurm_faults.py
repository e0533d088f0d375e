"""``dmlstudy slurm`` at the worst moments, on a real Slurm (harness/slurm.py: two slurmd nodes of 2 CPUs each in a
private network namespace, one cluster for the module), each with a tiny study so a job lasts well under two minutes:

- ``scancel --signal=TERM --full`` before the first epoch ends, as preemption and ``scancel`` signal every process of
  the job (the script, the driver and every Ray node at once): the driver stops for ``--resume`` (exit 3) and the job
  is requeued although the run checkpointed nothing (a preemption is not a time limit: the next run gets its whole
  time); in the requeued run, mid-trial, requeueing is turned off (``scontrol update Requeue=0``, so ``scontrol requeue`` answers
  "presently disabled") and the same signal ends the job FAILED with one line and the command that continues the
  study, which then finishes it, every epoch once;
- a time limit shorter than one epoch: the run checkpoints nothing, and the job is not requeued: one line with the
  run's times and the ``--time`` to give;
- two jobs whose ids differ by 120 on one node, started at the same moment (their heads' ports were one port before):
  both finish.

The tests print their timelines and the jobs' own lines (docs/notebook/cluster.md "Deploy on Slurm" quotes them).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from harness.driver import REPO, logged_epochs, mlflow_children, optuna_trials, tiny_spec
from harness.slurm import SlurmCluster, slurm_unavailable_reason
from trainables.schema import record as R

pytestmark = pytest.mark.e2e  # real studies through a real Slurm: minutes, not the fast lane

OBJECTIVE = "test/recall_at_1"  # logged once per epoch (tiny_spec: validation none)
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "gone")
DMLSTUDY = [sys.executable, "-m", "study.commands.cli"]


@dataclass
class Slurm:
    """The module's cluster, the jobs' short ``TMPDIR`` (Ray's sockets), and a timeline of what the tests saw."""

    cluster: SlurmCluster
    root: Path
    tmp: Path
    env: dict[str, str]
    t0: float = field(default_factory=time.monotonic)
    timeline: list[str] = field(default_factory=list)

    def mark(self, event: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.t0:6.1f} s  {event}")

    def spec(self, name: str, epochs: int, batches: int) -> tuple[Path, Path]:
        """A one-trial digits study of ``epochs`` × ``batches``: its spec file and its study directory."""
        spec = tiny_spec(name, epochs=epochs, num_trials=1)
        spec["train"]["batches_per_epoch"] = batches
        spec["storage"] = str(self.root / "runs")
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path, self.root / "runs" / name

    def submit(self, argv: list[str]) -> str:
        done = self.cluster.run([*DMLSTUDY, *argv], env=self.env, cwd=self.root)
        assert done.returncode == 0, done.stderr
        study_dir = self.root / "runs" / Path(argv[1]).stem
        job = (study_dir / R.SLURM_JOB_FILE).read_text().strip()
        self.mark(f"submitted job {job}: {shlex.join(argv)}")
        return job

    def follow(self, jobs: list[str], timeout: float, on_poll: Callable[[dict[str, tuple[str, str]]], None]) -> dict:
        """Poll ``jobs`` until each has ended (or ``timeout``); ``on_poll({job: (state, restarts)})`` on every poll."""
        seen: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = {}
            for job in jobs:
                fields = self.cluster.job(job)
                now[job] = (fields.get("JobState", "gone"), fields.get("Restarts", "?"))
                if now[job] != seen.get(job):
                    self.mark(f"job {job}: JobState={now[job][0]} Restarts={now[job][1]} {fields.get('ExitCode', '')}")
            seen = now
            on_poll(now)
            if all(state in ENDED for state, _ in now.values()):
                break
            time.sleep(1)
        return {job: self.cluster.job(job) for job in jobs}

    def show(self, title: str, logs: dict[str, str]) -> None:
        """Print the timeline and each job's own lines (the script's and study.deploy.job's, not Ray's)."""
        print(f"\n=== {title} ===", *self.timeline, sep="\n")
        for job, log in logs.items():
            print(
                f"--- job {job} ---", *(x for x in log.splitlines() if x.startswith("[20") and "] " in x[:22]), sep="\n"
            )
        self.timeline.clear()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    if (reason := slurm_unavailable_reason()) is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm_faults")
    tmp = Path(tempfile.mkdtemp(prefix="slf", dir="/tmp"))  # short: Ray's unix sockets live under RAY_TMPDIR
    try:
        with SlurmCluster(root / "slurm", cpus=2) as cluster:
            yield Slurm(cluster, root, tmp, cluster.env(TMPDIR=str(tmp), PYTHONPATH=str(REPO)))
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _log(study_dir: Path, job: str) -> str:
    path = study_dir / R.SLURM_LOG_FILE.replace("%j", job)
    return path.read_text() if path.exists() else ""


def _said(log: str, start: str) -> str:
    """The last of the job's lines that starts with ``start`` (after its timestamp), or ``""``."""
    lines = [x.split("] ", 1)[1] for x in log.splitlines() if x.startswith("[20") and "] " in x]
    return next((x for x in reversed(lines) if x.startswith(start)), "")


def _epochs_once(study_dir: Path, name: str, epochs: int) -> None:
    client, parents, children = mlflow_children(study_dir, name)
    assert [t.state.name for t in optuna_trials(study_dir, name)] == ["COMPLETE"]
    assert [p.info.status for p in parents] == ["FINISHED"] and [c.info.status for c in children] == ["FINISHED"]
    steps = [m.step for m in client.get_metric_history(children[0].info.run_id, OBJECTIVE)]
    assert steps == list(range(1, epochs + 1)), steps


def test_term_before_the_first_epoch_requeues_and_a_refused_requeue_fails_with_the_command(slurm: Slurm):
    """Run 1: ``scancel --signal=TERM --full`` once the driver has started and before any epoch is logged (a
    preemption while Ray and the data start): exit 3, requeued on SIGTERM, the line says it checkpointed nothing.
    Run 2: requeue turned off on the job, the same signal once an epoch is logged: "scontrol requeue ... failed
    (Requested operation is presently disabled ...)", FAILED 3:0, and the command that continues the study; that
    command finishes it, every epoch once. (The driver's exit 3 after Ray's nodes got the TERM with it is the driver's
    part: study.run.)"""
    epochs = 3  # run 1 checkpoints none, run 2 one (TERM ends Ray too: no drain), the continuation the rest
    spec, study_dir = slurm.spec("t_term", epochs=epochs, batches=300)  # 3-8 s an epoch
    job = slurm.submit(
        ["slurm", str(spec), "--nodes", "1", "--time", "5", "--signal-lead", "30", "--max-requeues", "3"]
    )
    before: dict[str, int] = {}  # restart count → epochs logged when that run was first seen running
    sent: dict[str, int] = {}  # restart count → epochs this run had logged when the signal went

    def signal_early_then_mid_trial(now: dict[str, tuple[str, str]]) -> None:
        state, restarts = now[job]
        if state != "RUNNING" or restarts in sent:
            return
        if restarts not in before:
            before[restarts] = logged_epochs(study_dir, "t_term")
            if restarts == "1":
                off = slurm.cluster.run(["scontrol", "update", f"JobId={job}", "Requeue=0"])
                assert off.returncode == 0, off.stderr
                slurm.mark(f"scontrol update JobId={job} Requeue=0")
        logged = logged_epochs(study_dir, "t_term") - before[restarts]
        ready = "driver: study.run" in _log(study_dir, job) if restarts == "0" else logged > 0
        if ready:  # run 1: its driver started, no epoch yet; run 2: mid-trial
            slurm.cluster.run(["scancel", "--signal=TERM", "--full", job])
            sent[restarts] = logged
            slurm.mark(f"scancel --signal=TERM --full {job} ({logged} epochs logged in this run)")

    ended = slurm.follow([job], 240, signal_early_then_mid_trial)[job]
    log = _log(study_dir, job)
    said = _said(log, "scontrol requeue")
    again = shlex.split(said.split("continue the study with: ", 1)[-1]) if said else []
    second = slurm.submit(again[1:]) if again[:2] == ["dmlstudy", "slurm"] else ""
    final = slurm.follow([second], 150, lambda _: None)[second] if second else {}
    slurm.show(
        "TERM before the first epoch; requeue refused", {job: log, second: _log(study_dir, second) if second else ""}
    )

    assert sent.get("0") == 0, (sent, log[-3000:])  # the preemption came before run 1 logged an epoch
    assert log.count("driver exited with") == 2, log[-3000:]  # 3, or 143 when the TERM came before its handlers
    requeued = _said(log, "requeueing (requeue 1 of at most 3)")
    assert requeued.startswith("requeueing (requeue 1 of at most 3) on SIGTERM (a preemption or scancel"), log[-3000:]
    # (no count when the TERM ended the driver before its handlers were in: exit 143, no progress record)
    assert requeued.endswith(("; this run checkpointed 0 epochs", "whatever this one checkpointed)")), requeued
    assert "SLURM_RESTART_COUNT=1" in log
    assert "not requeued: this run checkpointed no epoch" not in log
    assert said.startswith(
        f"scontrol requeue {job} failed (Requested operation is presently disabled for job {job}): the job is not "
        "requeued and ends FAILED; continue the study with: dmlstudy slurm "
    ), log[-3000:]
    assert "SIGUSR1 received again" not in log
    assert (ended.get("JobState"), ended.get("ExitCode"), ended.get("Restarts")) == ("FAILED", "3:0", "1")
    assert final.get("JobState") == "COMPLETED", _log(study_dir, second)[-3000:]
    _epochs_once(study_dir, "t_term", epochs)


def test_a_limit_shorter_than_an_epoch_is_not_requeued(slurm: Slurm):
    """``--time 1`` for an epoch of minutes: the signal comes, no epoch was checkpointed, nothing is requeued; one
    line with the run's length, that no epoch finished, and a ``--time`` of at least double."""
    spec, study_dir = slurm.spec("t_short", epochs=2, batches=20000)
    job = slurm.submit(["slurm", str(spec), "--nodes", "1", "--time", "1", "--signal-lead", "20"])
    ended = slurm.follow([job], 150, lambda _: None)[job]
    log = _log(study_dir, job)
    slurm.show("a limit shorter than an epoch", {job: log})
    said = _said(log, "not requeued: this run checkpointed no epoch")
    assert said, log[-3000:]
    assert "No epoch finished within it" in said and "--time 2 (now 1)" in said
    assert said.endswith("--signal-lead 20 --time 2") and "requeueing" not in log
    assert (ended.get("JobState"), ended.get("ExitCode"), ended.get("Restarts")) == ("FAILED", "3:0", "0")


def test_two_jobs_120_ids_apart_share_a_node(slurm: Slurm):
    """Two jobs on node n1 whose ids differ by 120, released at the same moment: before, both heads took port
    ``20000 + id % 120 * 100`` and the second job's "head is up" check met the first's head. Now each head's ports are
    the kernel's pick and each job waits for its own head (its token, its temp dir): both finish."""
    specs = [slurm.spec(name, epochs=1, batches=4) for name in ("t_port_a", "t_port_b")]
    argv = ["--nodes", "1", "--time", "5", "--sbatch=--nodelist=n1", "--sbatch=--hold"]
    first = slurm.submit(["slurm", str(specs[0][0]), *argv])
    slurm.cluster.advance_job_ids(int(first) + 120)
    second = slurm.submit(["slurm", str(specs[1][0]), *argv])
    released = slurm.cluster.run(["scontrol", "release", first, second])
    assert released.returncode == 0, released.stderr
    slurm.mark(f"released jobs {first} and {second} together")
    together: list[bool] = []
    ended = slurm.follow([first, second], 150, lambda now: together.append({s for s, _ in now.values()} == {"RUNNING"}))
    logs = {job: _log(study_dir, job) for job, (_, study_dir) in zip((first, second), specs)}
    slurm.show("two jobs 120 ids apart on n1", logs)

    assert int(second) - int(first) == 120 and (int(first) % 120) == (int(second) % 120)  # one port before
    assert any(together), "the two jobs never ran at the same time"
    addresses = {_said(log, "Ray cluster at") for log in logs.values()}
    assert len(addresses) == 2 and "" not in addresses, logs
    for job, (_, study_dir) in zip((first, second), specs):
        assert ended[job].get("JobState") == "COMPLETED", logs[job][-3000:]
        assert "study finished" in logs[job] and ended[job].get("NodeList") == "n1"
        assert not (slurm.tmp / f"dmlray-{job}").exists(), "the finished job left its RAY_TMPDIR"
        _epochs_once(study_dir, study_dir.name, 1)

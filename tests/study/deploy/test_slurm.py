"""``dmlstudy slurm`` on a real Slurm (issue 41): two slurmd nodes in a private network namespace (harness/slurm.py),
one job of a small study on ``--nodes 2`` (``--max-requeues 1``) whose 2-minute limit falls mid-study twice. Slurm
signals the job's script, the driver stops for ``--resume`` (exit 3), the script stops its own Ray nodes and requeues
the job; the requeued run resumes (``dmlstudy status`` names the job and its restart) and is stopped again, and with
its requeues used up the job ends with one line saying how to continue. The test runs that command with a longer
limit (``--time 10``): the second job resumes the study, and once it has logged an epoch the test cancels it
(``scancel``, every process SIGTERMed): it is not requeued (a requeue would undo the cancel), it says so with the
command that continues, and every trial's epochs so far were logged once each, in order. (A continuation that
finishes a study, every epoch once, is test_slurm_faults.py's; this one stops there to save CI's time.)

The test prints the timeline (submit, signal, requeue, resume, exhaustion, continuation, finish) and the jobs' logs.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.driver import REPO, logged_epochs, mlflow_children, optuna_trials, tiny_spec
from harness.slurm import SlurmCluster, slurm_unavailable_reason
from trainables.schema import record as R

pytestmark = pytest.mark.e2e  # real studies through a real Slurm: minutes, not the fast lane

NAME = "t_slurm"
OBJECTIVE = "test/recall_at_1"  # logged once per epoch (tiny_spec: validation none)
EPOCHS = 20  # short epochs (400 batches): each stop waits for the trials' next checkpoint
TRIALS = 10
FOREIGN_TOKEN = "foreign0token0of0another0cluster"


def _tokens(job_id: str) -> set[str]:
    """The Ray tokens in the environment of this job's processes (the test reads them where Ray does)."""
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = dict(v.split("=", 1) for v in environ.read_bytes().decode(errors="replace").split("\0") if "=" in v)
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") == job_id and env.get("RAY_AUTH_TOKEN"):
            found.add(env["RAY_AUTH_TOKEN"])
    return found


def _files_holding(roots: list[Path], tokens: set[str]) -> list[str]:
    hits = []
    for root in roots:
        for path in root.rglob("*"):
            try:
                data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            except OSError:
                continue
            hits += [f"{path}" for t in tokens if t.encode() in data]
    return hits


def test_a_job_requeues_at_its_time_limit_and_the_printed_command_resumes(tmp_path):
    if (reason := slurm_unavailable_reason()) is not None:
        pytest.skip(reason)
    spec = tiny_spec(NAME, epochs=EPOCHS, num_trials=TRIALS, max_concurrent=2)
    # 20 epochs of 400 batches, the work of 10 of 800 (~5 min of study quiet, 4 trials took 2: past two signals), but
    # half as long to wait at each stop for the trials' next checkpoint and for the continuation's first epoch.
    spec["train"]["batches_per_epoch"] = 400
    spec["storage"] = str(tmp_path / "runs")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    study_dir = tmp_path / "runs" / NAME
    tmp = Path(tempfile.mkdtemp(prefix="slt", dir="/tmp"))  # short: Ray's unix sockets live under RAY_TMPDIR
    try:
        _run_the_chain(tmp_path, spec_file, study_dir, tmp)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _follow(cluster: SlurmCluster, job_id: str, mark: Any, until: float, on_state: Any) -> str:
    """Poll job ``job_id`` until it ends (or ``until``); ``on_state(state, restarts)`` on every poll; its last state."""
    seen: tuple[str, str] = ("", "")
    while time.monotonic() < until:
        job = cluster.job(job_id)
        state = (job.get("JobState", "gone"), job.get("Restarts", "?"))
        if state != seen:
            mark(f"job {job_id}: JobState={state[0]} Restarts={state[1]}")
            seen = state
        on_state(*state)
        if state[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "gone"):
            break
        time.sleep(1)
    return seen[0]


def _run_the_chain(tmp_path: Path, spec_file: Path, study_dir: Path, tmp: Path) -> None:
    timeline: list[str] = []
    tokens: set[str] = set()
    epochs: dict[str, int] = {}
    status: list[str] = []
    with SlurmCluster(tmp_path / "slurm", cpus=1) as cluster:
        t0 = time.monotonic()

        def mark(event: str) -> None:
            timeline.append(f"{time.monotonic() - t0:6.1f} s  {event}")

        # The submitting shell holds a token of another Ray cluster (as a researcher's may, or this test process's
        # after in-process studies): sbatch must not carry it into the job, nor Slurm's state files.
        env = cluster.env(TMPDIR=str(tmp), PYTHONPATH=str(REPO), RAY_AUTH_TOKEN=FOREIGN_TOKEN)
        dmlstudy = [sys.executable, "-m", "study.commands.cli"]
        submit = cluster.run(
            [*dmlstudy, "slurm", str(spec_file), "--nodes", "2", "--time", "2", "--signal-lead", "45",
             "--max-requeues", "1"],
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert submit.returncode == 0, submit.stderr
        first = (study_dir / R.SLURM_JOB_FILE).read_text().strip()
        mark(f"submitted job {first}")

        def first_job(state: str, restarts: str) -> None:
            if state == "RUNNING":
                tokens.update(_tokens(first))
            if state == "PENDING" and restarts == "1" and "requeued" not in epochs:
                epochs["requeued"] = logged_epochs(study_dir, NAME)
                assert not _files_holding([tmp], tokens), "the first run's token is in a file under RAY_TMPDIR"
                mark(f"requeued with {epochs['requeued']} of {TRIALS * EPOCHS} epochs logged")
            if state == "RUNNING" and restarts == "1" and not status:  # the study says which job runs it
                shown = cluster.run([*dmlstudy, "status", str(spec_file)], env=env, cwd=tmp_path)
                status.append(shown.stdout + shown.stderr)
                mark("dmlstudy status: " + next((x.strip() for x in status[0].splitlines() if "Slurm job" in x), "?"))

        ended = _follow(cluster, first, mark, t0 + 420, first_job)
        epochs["exhausted"] = logged_epochs(study_dir, NAME)
        log = (study_dir / R.SLURM_LOG_FILE.replace("%j", first)).read_text()
        # After --max-requeues the job stopped with one line saying how to continue: run it, with a longer limit.
        said = next((x for x in log.splitlines() if "continue the study with: " in x), "")
        mark(f"requeues used up with {epochs['exhausted']} epochs logged: {said.split('] ', 1)[-1]}")
        again = shlex.split(said.split("continue the study with: ", 1)[-1])
        assert again[:2] == ["dmlstudy", "slurm"], said
        cont = cluster.run([*dmlstudy, *again[1:], "--time", "10"], env=env, cwd=tmp_path)
        assert cont.returncode == 0, cont.stderr
        second = (study_dir / R.SLURM_JOB_FILE).read_text().strip()
        mark(f"submitted job {second}: the printed command, --time 10")

        def second_job(state: str, _: str) -> None:
            if state == "RUNNING":
                tokens.update(_tokens(second))
                if "cancelled" not in epochs and logged_epochs(study_dir, NAME) > epochs["exhausted"]:
                    epochs["cancelled"] = logged_epochs(study_dir, NAME)
                    cluster.run(["scancel", second])
                    mark(f"scancel {second}: resumed, {epochs['cancelled']} epochs logged")

        final = _follow(cluster, second, mark, t0 + 600, second_job)
        time.sleep(3)  # a requeue would show by now
        after = cluster.job(second)
        log2 = (study_dir / R.SLURM_LOG_FILE.replace("%j", second)).read_text()
        print("\n".join(timeline), f"\n--- job {first} ---\n", log, f"\n--- job {second} ---\n", log2, sep="\n")
        leaks = _files_holding([study_dir, cluster.root, tmp, tmp_path / "spec.yaml"], tokens | {FOREIGN_TOKEN})

    assert ended == "FAILED", f"job {first} ended {ended}: {log[-2000:]}"  # exit 3: stopped, not requeued
    assert final == "CANCELLED" and after.get("Restarts") == "0", f"job {second}: {after}: {log2[-2000:]}"
    # Each run of the first job stopped mid-study: the limit fell mid-study twice.
    assert 0 < epochs["requeued"] < epochs["exhausted"] < TRIALS * EPOCHS, epochs
    assert log.count("SIGUSR1") >= 2, log[-3000:]
    assert "requeueing (requeue 1 of at most 1) on SIGUSR1; this run checkpointed" in log, log[-3000:]
    assert "SLURM_RESTART_COUNT=1" in log and log.count("driver exited with 3") == 2 and "2 of 2 nodes up" in log
    assert "stopped on SIGUSR1 after 1 requeues (--max-requeues)" in said, said
    assert f"Slurm job {first}: RUNNING, restarted 1 time(s)" in status[0], status
    assert "driver: study.run --resume" in log2 and "driver exited with 3" in log2 and "SLURM_RESTART_COUNT=0" in log2
    cancelled = next((x for x in log2.splitlines() if "the job was cancelled" in x), "")
    assert "not requeued" in cancelled and "continue the study with: dmlstudy slurm " in cancelled, log2[-2000:]
    assert FOREIGN_TOKEN not in tokens, "the submitting shell's token reached the job"
    tokens.discard(FOREIGN_TOKEN)
    assert len(tokens) >= 3, tokens  # a fresh token per run, seen in the job's processes
    assert not leaks, leaks
    trials = optuna_trials(study_dir, NAME)
    assert trials and {t.state.name for t in trials} <= {"RUNNING", "COMPLETE"}  # left for --resume, none failed
    client, parents, children = mlflow_children(study_dir, NAME)
    assert len(parents) == 1 and parents[0].info.status != "FINISHED"  # stopped for --resume, not finished
    assert children and "FAILED" not in {c.info.status for c in children}
    for child in children:  # every epoch logged so far, once, in order: nothing lost, nothing counted twice
        steps = [m.step for m in client.get_metric_history(child.info.run_id, OBJECTIVE)]
        assert steps == list(range(1, len(steps) + 1)), steps
    assert sum(len(client.get_metric_history(c.info.run_id, OBJECTIVE)) for c in children) >= epochs["cancelled"]

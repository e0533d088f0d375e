"""``dmlstudy slurm`` on a real Slurm (issue 41): two slurmd nodes in a private network namespace (harness/slurm.py),
one job of a small study on ``--nodes 2`` whose time limit falls mid-study. Slurm signals the job's script, the
driver stops for ``--resume`` (exit 3), the script stops its own Ray nodes and requeues the job, the requeued run
resumes and finishes.

The test prints the job's timeline (submit, signal, requeue, resume, finish) and its log. Between the runs, once the
job is requeued, it raises the job's time limit (``scontrol update``, as a researcher may): each run of the chain
would otherwise get the same 2 minutes, and the study would need as many requeues as its length allows.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.driver import REPO, logged_epochs, mlflow_children, optuna_trials, tiny_spec
from harness.slurm import SlurmCluster, slurm_unavailable_reason
from trainables.schema import record as R

NAME = "t_slurm"
OBJECTIVE = "test/recall_at_1"  # logged once per epoch (tiny_spec: validation none)
EPOCHS = 10
TRIALS = 4


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


def test_a_job_requeues_at_its_time_limit_and_finishes(tmp_path):
    if (reason := slurm_unavailable_reason()) is not None:
        pytest.skip(reason)
    spec = tiny_spec(NAME, epochs=EPOCHS, num_trials=TRIALS, max_concurrent=2)
    spec["train"]["batches_per_epoch"] = 400  # ~90 s of study on a quiet 2-core machine: past the signal
    spec["storage"] = str(tmp_path / "runs")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    study_dir = tmp_path / "runs" / NAME
    tmp = Path(tempfile.mkdtemp(prefix="slt", dir="/tmp"))  # short: Ray's unix sockets live under RAY_TMPDIR
    try:
        _run_the_chain(tmp_path, spec_file, study_dir, tmp)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _run_the_chain(tmp_path: Path, spec_file: Path, study_dir: Path, tmp: Path) -> None:
    timeline: list[str] = []
    with SlurmCluster(tmp_path / "slurm", cpus=1) as cluster:
        t0 = time.monotonic()

        def mark(event: str) -> None:
            timeline.append(f"{time.monotonic() - t0:6.1f} s  {event}")

        env = cluster.env(TMPDIR=str(tmp), PYTHONPATH=str(REPO))
        submit = cluster.run(
            [sys.executable, "-m", "study.cli", "slurm", str(spec_file), "--nodes", "2", "--time", "2",
             "--signal-lead", "45", "--max-requeues", "2"],
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert submit.returncode == 0, submit.stderr
        job_id = (study_dir / R.SLURM_JOB_FILE).read_text().strip()
        mark(f"submitted job {job_id}")
        tokens: set[str] = set()
        seen: tuple[str, str] = ("", "")
        mid_epochs = None
        while time.monotonic() - t0 < 480:
            job = cluster.job(job_id)
            state = (job.get("JobState", "gone"), job.get("Restarts", "?"))
            if state != seen:
                mark(f"JobState={state[0]} Restarts={state[1]}")
                seen = state
            if state[0] == "RUNNING":
                tokens |= _tokens(job_id)
            if state[1] == "1" and state[0] == "PENDING" and mid_epochs is None:
                mid_epochs = logged_epochs(study_dir, NAME)
                assert not _files_holding([tmp], tokens), "the first run's token is in a file under RAY_TMPDIR"
                cluster.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=10"])
                mark(f"requeued with {mid_epochs} of {TRIALS * EPOCHS} epochs logged; time limit raised to 10 min")
            if state[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "gone"):
                break
            time.sleep(1)
        log = (study_dir / R.SLURM_LOG_FILE.replace("%j", job_id)).read_text()
        print("\n".join(timeline), "\n--- job log ---\n", log, sep="\n")
        leaks = _files_holding([study_dir, cluster.root, tmp, tmp_path / "spec.yaml"], tokens)

    assert seen[0] == "COMPLETED", f"job ended {seen}: {log[-2000:]}"
    assert mid_epochs is not None and 0 < mid_epochs < TRIALS * EPOCHS, mid_epochs  # the limit fell mid-study
    assert "SIGUSR1" in log and "requeueing (requeue 1" in log and "SLURM_RESTART_COUNT=1" in log
    assert "driver exited with 3" in log and "driver exited with 0" in log and "2 of 2 nodes up" in log
    assert len(tokens) >= 2, tokens  # a fresh token per run, seen in the job's processes
    assert not leaks, leaks
    trials = optuna_trials(study_dir, NAME)
    assert sorted(t.state.name for t in trials) == ["COMPLETE"] * TRIALS
    _, parents, children = mlflow_children(study_dir, NAME)
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert len(children) == TRIALS and {c.info.status for c in children} == {"FINISHED"}
    client = mlflow_children(study_dir, NAME)[0]
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, OBJECTIVE)]
        assert steps == list(range(1, EPOCHS + 1)), steps  # each epoch once
    assert not list(tmp.glob(f"dmlray-{job_id}")), "the finished job left its RAY_TMPDIR"

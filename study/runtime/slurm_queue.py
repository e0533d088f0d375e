"""What Slurm says of a study's job: the one that ``dmlstudy slurm`` (:mod:`study.deploy.slurm`) submitted and
recorded in the study directory (:data:`~trainables.schema.record.SLURM_JOB_FILE`).

``dmlstudy status`` prints its line (:func:`print_job_line`, :func:`print_unstarted`) and ``dmlstudy slurm`` refuses
a second job while the first is live (:func:`live_job`). It sits below the status screens and the launchers alike, and
asks ``scontrol`` (then ``sacct``) only: nothing here imports a Slurm, Ray or tracking library.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainables.schema import record as R

__all__ = ["job_line", "job_state", "live_job", "print_job_line", "print_unstarted"]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def job_state(job_id: str) -> tuple[str, str]:
    """``(state, restarts)`` of a Slurm job from ``scontrol show job`` (then ``sacct`` for a job Slurm has
    forgotten); ``"unknown"`` where neither answers (no Slurm here, or the job is gone from both)."""
    shown = _run(["scontrol", "show", "job", "-o", job_id], timeout=10)
    if shown is not None and shown.returncode == 0:
        fields = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)
        if "JobState" in fields:
            return fields["JobState"], fields.get("Restarts", "unknown")
    acct = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], timeout=10)
    if acct is not None and acct.returncode == 0 and acct.stdout.strip():
        return acct.stdout.split()[0], "unknown"
    return "unknown", "unknown"


def job_line(study_dir: str) -> str | None:
    """``Slurm job 123: RUNNING, restarted 1 time(s)`` for a study launched by ``dmlstudy slurm``, else ``None``."""
    found = _job_of(study_dir)
    return None if found is None else found[0]


def _job_of(study_dir: str) -> tuple[str, str] | None:
    """:func:`job_line` and the job's state (``"unknown"`` without an answer), or ``None`` without a job."""
    if "://" in study_dir:
        return None
    path = Path(study_dir) / R.SLURM_JOB_FILE
    try:
        job_id = path.read_text().strip()
    except OSError:
        return None
    state, restarts = job_state(job_id)
    again = "restarts unknown" if restarts == "unknown" else f"restarted {restarts} time(s)"
    log = Path(study_dir) / R.SLURM_LOG_FILE.replace("%j", job_id)
    return f"Slurm job {job_id}: {state}, {again}; log {log}", state


#: Slurm's states of a job that will not run again (``scontrol``'s and ``sacct``'s names).
_ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
)


def print_unstarted(study_dir: str, what: str = "study") -> int | None:
    """``dmlstudy status`` of a study (or table) that ``dmlstudy slurm`` submitted and whose job has not started it
    yet (no spec file in its directory): print the job's line and return the exit code (0 while the job may still
    start it, 2 once it has ended); ``None`` when no job was submitted from ``study_dir``."""
    found = _job_of(study_dir)
    if found is None:
        return None
    line, state = found
    if state in _ENDED:
        print(f"error: the {what} in {study_dir} was never started: {line}", file=sys.stderr)
        return 2
    print(f"{line}; the {what} has not started yet")
    return 0


def print_job_line(study_dir: str, indent: str = "") -> None:
    """Print :func:`job_line` when the study was launched by ``dmlstudy slurm`` (``dmlstudy status``)."""
    if (line := job_line(study_dir)) is not None:
        print(indent + line)


def live_job(study_dir: Path) -> str | None:
    """The study's earlier job if Slurm still has it pending or running (``"123 (RUNNING)"``), else ``None``."""
    try:
        job_id = (study_dir / R.SLURM_JOB_FILE).read_text().strip()
    except OSError:
        return None
    state, _ = job_state(job_id)
    live = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUE_HOLD", "RESIZING")
    return f"{job_id} ({state})" if state in live else None

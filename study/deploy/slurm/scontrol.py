"""What Slurm says of a running job, for the job's own commands: ``scontrol`` run with a bound (:func:`run_scontrol`),
its ``show job`` line read (:class:`SlurmView`, :func:`show_job`), and Slurm's durations (:func:`slurm_seconds`, by
which ``dmlstudy slurm`` checks its ``--time`` too)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

__all__ = ["SlurmView", "slurm_seconds", "parse_job_fields", "run_scontrol", "show_job"]

_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class SlurmView:
    """What ``scontrol show job`` says of the running job, read as its script ends.

    Args:
        state: ``JobState`` (``RUNNING``; ``COMPLETING`` once Slurm has told the job to end).
        restarts: ``Restarts``: higher than the run's ``SLURM_RESTART_COUNT`` once Slurm requeued it itself.
        run_time_s: ``RunTime`` of this run (``None``: unreadable).
        time_limit_s: ``TimeLimit`` (``None``: ``UNLIMITED`` or unreadable).
    """

    state: str
    restarts: int
    run_time_s: int | None
    time_limit_s: int | None


def slurm_seconds(text: str) -> int | None:
    """A Slurm duration (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``: ``--time`` as sbatch
    takes it and ``RunTime``/``TimeLimit`` as ``scontrol`` prints them) in seconds; ``None`` for ``UNLIMITED``,
    ``Partition_Limit`` or anything else."""
    m = _DURATION.match(text.strip())
    if m is None:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(a) * 60 + int(b or 0)  # MM[:SS]


def parse_job_fields(text: str) -> SlurmView | None:
    """:class:`SlurmView` from ``scontrol show job -o ID``'s one line (``None`` when it names no job)."""
    fields = dict(f.split("=", 1) for f in text.split() if "=" in f)
    if "JobState" not in fields:
        return None
    restarts = fields.get("Restarts", "0")
    return SlurmView(
        state=fields["JobState"],
        restarts=int(restarts) if restarts.isdigit() else 0,
        run_time_s=slurm_seconds(fields.get("RunTime", "")),
        time_limit_s=slurm_seconds(fields.get("TimeLimit", "")),
    )


def run_scontrol(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def show_job(job_id: str) -> SlurmView | None:
    shown = run_scontrol(["show", "job", "-o", job_id])
    return parse_job_fields(shown.stdout) if shown is not None and shown.returncode == 0 else None

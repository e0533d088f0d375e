"""How a run of a ``dmlstudy slurm`` job ends, once its driver has exited (``python -m study.deploy.job end``):
:func:`decide` reads what the run left (:class:`RunEnd`), :func:`finish` says the line and runs the requeue.

Exit 3 ("stopped, continue with ``--resume``") is requeued while ``--max-requeues`` lasts, unless the job was
cancelled or Slurm requeues it itself (preemption with ``PreemptMode=REQUEUE``). After ``SIGTERM`` (a preemption,
``scancel --signal=TERM``) it is requeued whatever the run did: the next run gets its whole time. After the time
limit's ``SIGUSR1`` only when a requeue gains something: the run checkpointed at least one epoch
(:class:`~study.runtime.driver_run.RunProgress`, written by the driver as it exits), for a requeued run would get the
same too-short window. Which signal stopped the run: the driver's record of it, else the job script's (``--signal``:
the first it trapped, also when the driver never started). ``scontrol requeue`` failing is said, and the job ends
FAILED. Every ending that is not a requeue and not "finished" is one line ending in the command that continues the
study; every line is written as the script's ``say`` writes it (:func:`say`).
"""

from __future__ import annotations

import math
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from study.arguments import one_line
from study.deploy.slurm.scontrol import SlurmView
from study.runtime.driver_run import RunProgress

__all__ = ["say", "RunEnd", "Ending", "with_time", "stopped_by", "decide", "finish"]

#: Slurm checks for due signals about every 30 s, so ``--signal=B:USR1@LEAD`` may come up to this much earlier.
SIGNAL_SLACK_S = 30
#: Job states in which the job has been told to end (``scancel``, preemption, a time limit) while its script runs.
_ENDING_STATES = frozenset({"COMPLETING", "CANCELLED", "PREEMPTED", "TIMEOUT"})


def say(line: str, err: bool = False) -> None:
    """One line of the job's log, as the script's ``say`` writes it (``err``: on stderr, where a command's stdout is
    the script's value)."""
    print(f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {line}", file=sys.stderr if err else sys.stdout, flush=True)


@dataclass(frozen=True)
class RunEnd:
    """Everything :func:`decide` looks at when a run of the job ends.

    Args:
        rc: the driver's exit code (3 when the signal came before it started; 143 when the signal's SIGTERM ended it
            before it could stop).
        restarts: this run's ``SLURM_RESTART_COUNT`` (0 in the job's first run).
        max_requeues: ``--max-requeues``.
        elapsed_s: seconds since the script started (bash's ``$SECONDS``).
        signal_lead_s: ``--signal-lead``.
        continue_command: the ``dmlstudy slurm`` command that continues the study.
        study_log: the study's log, named when the driver failed.
        driver_started: whether the driver ran in this run at all.
        progress: this run's :class:`RunProgress` (``None``: missing, or not this run's; ``progress_note`` says).
        progress_note: why ``progress`` is ``None``.
        slurm: what Slurm says of the job now (``None``: ``scontrol`` did not answer).
        earlier: the study's earlier runs' records (:data:`~trainables.schema.record.SLURM_RUNS_FILE`), oldest first.
        signal: the first stop signal the job script trapped (``"SIGTERM"``; ``None``: none).
    """

    rc: int
    restarts: int
    max_requeues: int
    elapsed_s: float
    signal_lead_s: int
    continue_command: str
    study_log: str = ""
    driver_started: bool = True
    progress: RunProgress | None = None
    progress_note: str = ""
    slurm: SlurmView | None = None
    earlier: tuple[RunProgress, ...] = ()
    signal: str | None = None


Action = Literal["finished", "requeue", "slurm-requeues", "stop", "failed"]


@dataclass(frozen=True)
class Ending:
    """What the script does: ``action``, one line for its log, and its exit code.

    ``requeue`` still has to run ``scontrol requeue`` (:func:`finish`); its exit code is the one for success.
    """

    action: Action
    line: str
    exit_code: int


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60))


def with_time(command: str, minutes: int) -> str:
    """``command`` (a ``dmlstudy slurm`` line) with ``--time`` set to ``minutes``."""
    words = shlex.split(command)
    out: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word == "--time" and i + 1 < len(words):
            skip = True
        elif not word.startswith("--time="):
            out.append(word)
    return shlex.join([*out, "--time", str(minutes)])


def _continue(end: RunEnd) -> str:
    return f"continue the study with: {end.continue_command}"


def _checkpointed(progress: RunProgress | None) -> str:
    return "" if progress is None else f"; this run checkpointed {_epochs(progress.epochs_checkpointed)}"


def _no_progress(end: RunEnd) -> Ending:
    """Exit 3 after a run that checkpointed nothing: a requeue would repeat it. Say which ``--time`` would work."""
    p, limit = end.progress, end.slurm.time_limit_s if end.slurm else None
    run = f"in its {end.elapsed_s:.0f} s"
    if p is not None:
        run += f" (the driver ran {p.run_s:.0f} s{f', stopped on {p.stopped_on}' if p.stopped_on else ''})"
    elif not end.driver_started:
        run += f" ({stopped_by(end) or 'the signal'} came before the driver started)"
    # The time from the job's start to its first checkpoint: Ray's start-up (the run less the driver), then the
    # driver's to its first epoch (its startup_s includes that epoch), or an epoch measured in an earlier run.
    before_driver = max(0.0, end.elapsed_s - p.run_s) if p is not None else end.elapsed_s
    measured = [q for q in (p, *reversed(end.earlier)) if q is not None and (q.startup_s or q.epoch_s)]
    now = f" (now {_minutes(limit)})" if limit else ""
    if measured:
        m = measured[0]
        from_where = "in this run" if m is p else "in an earlier run"
        first = before_driver + (m.startup_s if m.startup_s else 2 * (m.epoch_s or 0))
        need = first + end.signal_lead_s + SIGNAL_SLACK_S
        need += max(60.0, 0.25 * first)  # margin: a loaded node, a slower restore
        epoch = f"A trial-epoch takes {m.epoch_s:.0f} s" if m.epoch_s else "No epoch time is known"
        startup = f"start-up to the first epoch {m.startup_s:.0f} s" if m.startup_s else "start-up unknown"
        minutes = _minutes(need)
        why = (
            f"{epoch} and {startup} (measured {from_where}), Ray's start {before_driver:.0f} s: a run needs start-up + "
            f"one epoch + the signal lead {end.signal_lead_s} s + Slurm's {SIGNAL_SLACK_S} s signal slack + a margin"
        )
    else:
        minutes = 2 * _minutes(limit) if limit else 2 * _minutes(end.elapsed_s)
        why = "No epoch finished within it, so the time an epoch takes is unknown: give it at least double"
    return Ending(
        "stop",
        f"not requeued: this run checkpointed no epoch {run}, and a requeued run would do the same. {why}: "
        f"--time {minutes}{now}; continue the study with: {with_time(end.continue_command, minutes)}",
        3,
    )


def stopped_by(end: RunEnd) -> str | None:
    """The signal that stopped the run (``"SIGTERM"``): the first the driver received, as its progress says, else the
    first the job script trapped (the driver never started, or its record is missing)."""
    if end.progress is not None and end.progress.stopped_on:
        return end.progress.stopped_on
    return end.signal


def _on(end: RunEnd) -> str:
    sig = stopped_by(end)
    return f" on {sig}" if sig else ""


def _terminated(end: RunEnd) -> Ending:
    """Exit 3 after ``SIGTERM`` (a preemption, ``scancel --signal=TERM``): requeued whatever the run checkpointed. The
    zero-progress rule is the time limit's: a requeued run would get the same window, whereas after a preemption it
    gets its whole time, and the job has just lost its place in the queue."""
    done = _checkpointed(end.progress) if end.driver_started else "; the driver had not started"
    if end.restarts >= end.max_requeues:
        return Ending(
            "stop", f"stopped on SIGTERM after {end.max_requeues} requeues (--max-requeues){done}; {_continue(end)}", 3
        )
    return Ending(
        "requeue",
        f"requeueing (requeue {end.restarts + 1} of at most {end.max_requeues}) on SIGTERM (a preemption or scancel: "
        f"the next run gets its whole time, whatever this one checkpointed){done}",
        0,
    )


def decide(end: RunEnd) -> Ending:
    """The ending for a run of the job whose driver exited with ``end.rc`` (before any ``scontrol requeue``)."""
    if end.rc == 0:
        return Ending("finished", "study finished", 0)
    # The job's SIGTERM ended the driver before it could stop (still importing): a stop like any other.
    killed_by_term = end.rc == 128 + signal.SIGTERM and stopped_by(end) == "SIGTERM"
    if end.rc != 3 and not killed_by_term:
        why = "2 bad input, 1 the study failed" if end.rc in (1, 2) else "killed, or it crashed"
        see = f"; see {end.study_log}" if end.study_log else ""
        return Ending("failed", f"the driver failed (exit {end.rc}: {why}); not requeued{see}", end.rc)
    done = _checkpointed(end.progress)
    view = end.slurm
    if view is not None and view.restarts > end.restarts:
        return Ending(
            "slurm-requeues", f"Slurm requeues the job itself (preempted{_on(end)}): its next run resumes{done}", 0
        )
    if view is not None and view.state in _ENDING_STATES:
        limit, ran = view.time_limit_s, view.run_time_s
        if limit is None or ran is None or ran < limit:  # not its time limit: scancel, or an administrator
            return Ending(
                "stop",
                f"the job was cancelled{_on(end)} (JobState {view.state} before its time limit): not requeued{done}; "
                f"{_continue(end)}",
                3,
            )
    if stopped_by(end) == "SIGTERM":
        return _terminated(end)
    if end.progress is None and end.driver_started:
        return Ending(
            "stop",
            f"not requeued: {end.progress_note}, so whether this run made progress{_on(end)} is unknown and a requeue "
            f"might only repeat it; {_continue(end)}",
            3,
        )
    if end.progress is None or end.progress.epochs_checkpointed == 0:
        return _no_progress(end)
    if end.restarts >= end.max_requeues:
        return Ending(
            "stop", f"stopped{_on(end)} after {end.max_requeues} requeues (--max-requeues){done}; {_continue(end)}", 3
        )
    return _requeue(end)


def _requeue(end: RunEnd) -> Ending:
    """Exit 3 after a run that checkpointed: requeued, with what it did and how long its epochs took."""
    p = end.progress
    assert p is not None
    times = ", ".join(
        t
        for t in (
            f"epoch {p.epoch_s:.0f} s" if p.epoch_s else "",
            f"start-up {p.startup_s:.0f} s" if p.startup_s else "",
        )
        if t
    )
    return Ending(
        "requeue",
        f"requeueing (requeue {end.restarts + 1} of at most {end.max_requeues}){_on(end)}{_checkpointed(p)}"
        + (f" ({times})" if times else ""),
        0,
    )


def finish(
    end: RunEnd, job_id: str, requeue: Callable[[], tuple[int, str]], view: Callable[[], SlurmView | None]
) -> Ending:
    """Say :func:`decide`'s line and, for a requeue, run ``requeue()`` (``scontrol requeue``: its exit code and
    message); when it fails the job is either being requeued by Slurm itself (``view()``: preemption) or it ends
    FAILED (exit 3) with one more line and the command that continues the study."""
    ending = decide(end)
    say(ending.line)
    if ending.action != "requeue":
        return ending
    rc, message = requeue()
    if rc == 0:
        return ending
    now = view()
    if now is not None and now.restarts > end.restarts:
        ending = Ending("slurm-requeues", "Slurm requeues the job itself (preempted): its next run resumes", 0)
    else:
        ending = Ending(
            "stop",
            f"scontrol requeue {job_id} failed ({one_line(message) or f'exit {rc}'}): the job is not requeued and ends "
            f"FAILED; {_continue(end)}",
            3,
        )
    say(ending.line)
    return ending

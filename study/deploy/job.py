"""``python -m study.deploy.job COMMAND``: what a ``dmlstudy slurm`` job decides while it runs, in Python rather than
in its bash, so that each decision is tested without a Slurm (tests/study/deploy/test_slurm_job.py) and the script stays
the short one a user reads (docs/cluster.md "Deploy on Slurm").

The job script calls, in each run of the job:

- ``nodes``: the job's nodes, one a line, the node running the script first: it holds the Ray head, whose address
  file only that node can read.
- ``ray-node``: this node's ``ray start --block`` (exec'd, so the ``srun`` step's signals reach it), every port Ray
  listens on picked by the kernel when it binds (:func:`ray_start_argv`): nothing fixed that another job on the node
  could already hold, nothing derived from the job id (ids 120 apart shared one port before).
- ``wait-head``: wait, bounded, until *this job's* head is up and print its address: the GCS address Ray itself
  wrote to the job's ``RAY_TMPDIR`` in this run, a GCS there that accepts this run's token, and a head node in it
  whose temp dir is this job's (:func:`this_jobs_head`). A connect that another job's head answers is not enough.
- ``wait-nodes``: wait, bounded, until every node has joined.
- ``end``: after the driver exits (:func:`decide`, then :func:`finish`). Exit 3 ("stopped, continue with
  ``--resume``") is requeued while ``--max-requeues`` lasts, unless the job was cancelled or Slurm requeues it itself
  (preemption with ``PreemptMode=REQUEUE``). After ``SIGTERM`` (a preemption, ``scancel --signal=TERM``) it is
  requeued whatever the run did: the next run gets its whole time. After the time limit's ``SIGUSR1`` only when a
  requeue gains something: the run checkpointed at least one epoch
  (:class:`~study.runtime.run_progress.RunProgress`, written by the driver as it exits), for a requeued run would get
  the same too-short window. Which signal stopped the run: the driver's record of it, else the job script's
  (``--signal``: the first it trapped, also when the driver never started). ``scontrol requeue`` failing is said,
  and the job ends FAILED. Every ending that is not a requeue and not "finished" is one line ending in the command
  that continues the study. Each run's record is appended to the study's
  :data:`~trainables.schema.record.SLURM_RUNS_FILE`, so a later run that measured no epoch still knows how long one
  takes.

Each command prints its lines as the script's ``say`` does (``[date time] line``) and exits with the code the script
passes on.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, NoReturn

from study.arguments import ArgumentParser, one_line
from study.runtime.cluster import quiet_fd2
from study.runtime.compat import cluster_nodes, ray_client_installed
from study.runtime.run_progress import RunProgress, read_run_progress
from trainables.schema import record as R

__all__ = [
    "SlurmView",
    "RunEnd",
    "Ending",
    "head_first",
    "RayNode",
    "ray_start_argv",
    "read_head_address",
    "this_jobs_head",
    "HeadWait",
    "wait_head",
    "slurm_seconds",
    "parse_job_fields",
    "with_time",
    "stopped_by",
    "decide",
    "finish",
    "main",
]

#: Ray writes the GCS address of the node it started into its temp dir under this name (``ray start``; Ray's
#: ``get_ray_address_file``): with ``--port=0`` it is the port the GCS bound.
RAY_ADDRESS_FILE = "ray_current_cluster"
#: Slurm checks for due signals about every 30 s, so ``--signal=B:USR1@LEAD`` may come up to this much earlier.
SIGNAL_SLACK_S = 30
#: How long ``wait-head`` and ``wait-nodes`` wait by default.
HEAD_TIMEOUT_S = 120
NODES_TIMEOUT_S = 300
#: A progress record written this long before the run's start still counts as this run's (clocks of a node and a
#: shared file system's server differ a little; a requeued run starts ≥ 10 s after the last one ended).
CLOCK_SLACK_S = 5
#: Job states in which the job has been told to end (``scancel``, preemption, a time limit) while its script runs.
_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_ENDING_STATES = frozenset({"COMPLETING", "CANCELLED", "PREEMPTED", "TIMEOUT"})


def say(line: str, err: bool = False) -> None:
    """One line of the job's log, as the script's ``say`` writes it (``err``: on stderr, where a command's stdout is
    the script's value)."""
    print(f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {line}", file=sys.stderr if err else sys.stdout, flush=True)


# ------------------------------------------------------------------------------------------------------ the nodes


def head_first(hosts: Sequence[str], batch_host: str | None) -> list[str]:
    """The job's nodes with the one running the batch script first (it starts the head and reads its address)."""
    if batch_host and batch_host in hosts:
        return [batch_host, *(h for h in hosts if h != batch_host)]
    return list(hosts)


@dataclass(frozen=True)
class RayNode:
    """One node of the job as ``ray start`` is told of it: the address Slurm reaches it at, its share of the node,
    and the job's own ``RAY_TMPDIR``."""

    ip: str
    cpus: int
    gpus: int
    tmpdir: str


def ray_start_argv(ray: str, node: RayNode, *, address: str | None, ray_client: bool) -> list[str]:
    """``ray start --block`` for one node of the job; ``address`` ``None`` makes it the head.

    Every port is 0, "the kernel picks one when the process binds", so it cannot be one another job on the node
    already listens on, and nothing depends on the job id. Ray's fixed defaults are each replaced: the GCS (6379;
    its port is then read from :data:`RAY_ADDRESS_FILE`), the dashboard (8265) and the dashboard agent (52365), and
    the workers' shared range 10002-19999. The Ray Client server (10001) is not started: the driver connects to the
    GCS. Ray picks the rest itself already (raylet, object manager, runtime-env and metrics agents).
    """
    argv = [ray, "start", "--block", "--disable-usage-stats", f"--node-ip-address={node.ip}"]
    argv += [f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}", f"--temp-dir={node.tmpdir}"]
    argv += ["--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0"]
    if address is not None:
        return [*argv, f"--address={address}"]
    argv += ["--head", "--port=0", "--include-dashboard=false", "--dashboard-port=0"]
    if ray_client:  # Ray refuses the option where the client's dependencies are missing (and then starts none)
        argv.append("--ray-client-server-port=0")
    return argv


def read_head_address(tmpdir: str | Path, since: float) -> str | None:
    """The GCS address Ray wrote to ``tmpdir`` at ``since`` or later (an older file is an earlier run's)."""
    path = Path(tmpdir) / RAY_ADDRESS_FILE
    try:
        if path.stat().st_mtime < since - 1:  # whole seconds in the script's clock
            return None
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def this_jobs_head(address: str, tmpdir: str | Path) -> tuple[bool, str]:
    """Whether the GCS at ``address`` is this job's head, and if not why: it must accept this process's token
    (``RAY_AUTH_TOKEN``, fresh in each run) and hold an alive head node whose temp dir is this job's ``tmpdir``
    (another user's Ray without authentication accepts any token)."""
    from ray.exceptions import AuthenticationError  # defers Ray: only the steps that talk to the head import it

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            pass
    except (OSError, ValueError) as e:
        return False, f"nothing answers at {address} ({getattr(e, 'strerror', None) or type(e).__name__})"
    try:
        with quiet_fd2():
            nodes = cluster_nodes(address, timeout_s=5)
    except AuthenticationError:
        return False, f"the Ray head at {address} refuses this job's token: it is another job's"
    except Exception as e:  # noqa: BLE001 - a GCS still starting, or gone again: asked again until the deadline
        return False, f"the Ray head at {address} did not answer ({one_line(str(e))[:200]})"
    mine = os.path.realpath(tmpdir)
    heads = [n for n in nodes if n.head and n.alive]
    if any(os.path.realpath(n.temp_dir) == mine for n in heads):
        return True, ""
    if not heads:
        return False, f"the Ray cluster at {address} has no live head node yet"
    return False, f"the Ray head at {address} is another job's (its temp dir is {heads[0].temp_dir}, not {mine})"


@dataclass(frozen=True)
class HeadWait:
    """What :func:`wait_head` waits for: an address Ray writes to ``tmpdir`` at ``since`` or later (this run's), for at
    most ``timeout_s`` seconds."""

    tmpdir: str | Path
    since: float
    timeout_s: float


def wait_head(
    wait: HeadWait,
    alive: Callable[[], bool],
    check: Callable[[str, str | Path], tuple[bool, str]] = this_jobs_head,
    poll_s: float = 0.5,
) -> tuple[str | None, str]:
    """``(address, "")`` once this job's head is up, else ``(None, why)`` when ``alive()`` turns false (the head's
    ``srun`` step ended) or after ``wait.timeout_s``."""
    tmpdir, since, timeout_s = wait.tmpdir, wait.since, wait.timeout_s
    deadline = time.monotonic() + timeout_s
    why = f"Ray wrote no address to {Path(tmpdir) / RAY_ADDRESS_FILE} in this run"
    while True:
        address = read_head_address(tmpdir, since)
        if address is not None:
            ok, why = check(address, tmpdir)
            if ok:
                return address, ""
        if not alive():
            return None, f"the Ray head's srun step ended before the head was up ({why}; its lines are above)"
        if time.monotonic() > deadline:
            return None, f"this job's Ray head was not up within {timeout_s:.0f} s ({why})"
        time.sleep(poll_s)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that has exited but is not yet reaped (the script's srun) still answers kill -0: look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# ------------------------------------------------------------------------------------------------ what Slurm says


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


def _scontrol(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _view(job_id: str) -> SlurmView | None:
    shown = _scontrol(["show", "job", "-o", job_id])
    return parse_job_fields(shown.stdout) if shown is not None and shown.returncode == 0 else None


# ------------------------------------------------------------------------------------------- the end of one run


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


# --------------------------------------------------------------------------------------- this run's records


def _this_runs_progress(study_dir: Path, rc: int, started: float) -> tuple[RunProgress | None, str]:
    """The driver's record of this run, or ``None`` and why (none written, or one of an earlier run)."""
    path = study_dir / R.RUN_PROGRESS_FILE
    progress = read_run_progress(study_dir)
    if progress is None:
        return None, f"the driver left no readable {path}"
    try:
        written = path.stat().st_mtime
    except OSError:
        return None, f"the driver left no readable {path}"
    if written < started - CLOCK_SLACK_S:
        when = datetime.fromtimestamp(written).strftime("%Y-%m-%d %H:%M:%S")
        return None, f"{path} is an earlier run's (written {when}, before this run began)"
    if progress.exit_code != rc:
        return None, f"{path} says exit {progress.exit_code}, not this run's {rc}"
    return progress, ""


def _earlier_runs(study_dir: Path) -> tuple[RunProgress, ...]:
    out = []
    try:
        lines = (study_dir / R.SLURM_RUNS_FILE).read_text().splitlines()
    except OSError:
        return ()
    names = {f.name for f in dataclasses.fields(RunProgress)}
    for line in lines:
        try:
            data = json.loads(line)
            out.append(RunProgress(**{k: data[k] for k in names}))
        except (ValueError, KeyError, TypeError):
            continue
    return tuple(out)


def _record(study_dir: Path, job_id: str, end: RunEnd, ending: Ending) -> None:
    """Append this run's record (its progress, how it ended) to the study's runs file."""
    record: dict[str, object] = {
        "job": job_id,
        "run": end.restarts + 1,
        "ended": datetime.now().isoformat(timespec="seconds"),
        "elapsed_s": round(end.elapsed_s),
        "ending": ending.action,
        "exit": ending.exit_code,
    }
    if end.progress is not None:
        record.update(dataclasses.asdict(end.progress))
    try:
        with open(study_dir / R.SLURM_RUNS_FILE, "a") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        say(f"(could not append to {study_dir / R.SLURM_RUNS_FILE}: {e.strerror})")


# ------------------------------------------------------------------------------------------------ command line


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m study.deploy.job", description="The decisions of a dmlstudy slurm job.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("nodes", help="the job's nodes, the batch script's first")
    node = sub.add_parser("ray-node", help="exec this node's ray start --block")
    node.add_argument("--ray", required=True)
    node.add_argument("--ip", required=True)
    node.add_argument("--cpus", type=int, required=True)
    node.add_argument("--gpus", type=int, default=0)
    node.add_argument("--tmpdir", required=True)
    node.add_argument("--address", default=None, help="the head's address (a worker node); none: the head")
    head = sub.add_parser("wait-head", help="print this job's head's address once it is up")
    head.add_argument("--tmpdir", required=True)
    head.add_argument("--pid", type=int, required=True, help="the head's srun step")
    head.add_argument("--since", type=float, required=True, help="when the head was started (epoch seconds)")
    head.add_argument("--timeout", type=float, default=HEAD_TIMEOUT_S)
    nodes = sub.add_parser("wait-nodes", help="wait until N nodes are alive")
    nodes.add_argument("address")
    nodes.add_argument("count", type=int)
    nodes.add_argument("--timeout", type=float, default=NODES_TIMEOUT_S)
    end = sub.add_parser("end", help="after the driver: requeue, or say why not; exits with the job's code")
    end.add_argument("--rc", type=int, required=True)
    end.add_argument("--driver-pid", default="", help="the driver's PID (empty: it never started)")
    end.add_argument("--elapsed", type=float, required=True, help="seconds since the script started")
    end.add_argument("--study-dir", required=True)
    end.add_argument("--max-requeues", type=int, required=True)
    end.add_argument("--signal-lead", type=int, required=True)
    end.add_argument("--continue", dest="continue_command", required=True)
    end.add_argument("--study-log", default="")
    end.add_argument("--signal", default="", help="the first stop signal the script trapped (SIGTERM; empty: none)")
    return p


def _exec_ray_node(a: argparse.Namespace) -> NoReturn:
    if a.address is None:  # the head: an earlier run's address file must not be read as this run's
        with contextlib.suppress(OSError):
            (Path(a.tmpdir) / RAY_ADDRESS_FILE).unlink()
    node = RayNode(ip=a.ip, cpus=a.cpus, gpus=a.gpus, tmpdir=a.tmpdir)
    argv = ray_start_argv(a.ray, node, address=a.address, ray_client=ray_client_installed())
    sys.stdout.flush()
    os.execv(argv[0], argv)


def _wait_nodes(address: str, count: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    up = 0
    while True:
        with contextlib.suppress(Exception), quiet_fd2():
            up = sum(n.alive for n in cluster_nodes(address, timeout_s=10))
        if up >= count or time.monotonic() > deadline:
            break
        time.sleep(1)
    say(f"ray: {up} of {count} nodes up" + ("" if up >= count else f" after {timeout_s:.0f} s; the study runs on them"))
    return 0


def _end(a: argparse.Namespace) -> int:
    job_id = os.environ.get("SLURM_JOB_ID", "?")
    study_dir = Path(a.study_dir)
    driver_started = bool(a.driver_pid)
    stopped = a.rc in (3, 128 + signal.SIGTERM)  # what decide looks further at
    progress, note = (None, "the driver did not run")
    if driver_started:
        progress, note = _this_runs_progress(study_dir, a.rc, time.time() - a.elapsed)
    end = RunEnd(
        rc=a.rc,
        restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0),
        max_requeues=a.max_requeues,
        elapsed_s=a.elapsed,
        signal_lead_s=a.signal_lead,
        continue_command=a.continue_command,
        study_log=a.study_log,
        driver_started=driver_started,
        progress=progress,
        progress_note=note,
        slurm=_view(job_id) if stopped else None,
        earlier=_earlier_runs(study_dir) if stopped else (),
        signal=a.signal or None,
    )

    def requeue() -> tuple[int, str]:
        done = _scontrol(["requeue", job_id], timeout=60)
        if done is None:
            return 1, "scontrol did not answer"
        return done.returncode, (done.stderr or done.stdout).strip()

    ending = finish(end, job_id, requeue, lambda: _view(job_id))
    if ending.action != "finished":
        _record(study_dir, job_id, end, ending)
    return ending.exit_code


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.command == "nodes":
        shown = _scontrol(["show", "hostnames", os.environ.get("SLURM_JOB_NODELIST", "")])
        if shown is None or shown.returncode != 0:
            say("scontrol show hostnames failed: the job's nodes are unknown; not requeued", err=True)
            return 1
        print("\n".join(head_first(shown.stdout.split(), os.environ.get("SLURMD_NODENAME"))))
        return 0
    if a.command == "ray-node":
        _exec_ray_node(a)
    if a.command == "wait-head":
        address, why = wait_head(HeadWait(a.tmpdir, a.since, a.timeout), alive=lambda: _pid_alive(a.pid))
        if address is None:
            say(f"{why}; not requeued", err=True)
            return 1
        print(address)
        return 0
    if a.command == "wait-nodes":
        return _wait_nodes(a.address, a.count, a.timeout)
    return _end(a)


if __name__ == "__main__":
    sys.exit(main())

"""One invocation of ``python -m study.run``: its command line, the commands that repeat or continue it, and its last
words (the line saying how to continue a stopped run, and what the run achieved in its study directory).

Apart from :mod:`study.run` so that the command reads as its steps (intake, bill, run, report) and what a printed
command must get right (every option that shapes the run, shell-quoted, passwords masked, a job's private Ray left
out: tests/study/test_printed_commands.py) is one room.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from study.arguments import ArgumentParser, max_failures
from study.intake.layout import StudyLayout
from study.runtime import stopping
from study.runtime.driver_run import RunWall, append_driver_wall, run_meter, run_wall, write_run_progress
from study.runtime.storage import read_bytes
from study.search.context import RunOptions
from study.tracking.credentials import shell_command
from trainables.schema import record as R

if TYPE_CHECKING:
    from study.search.outcome import StudyOutcome

__all__ = ["parser", "Invocation", "SLURM_JOB_RAY_DIR", "job_private_address", "run_options", "interrupted"]


def parser(prog: str = "python -m study.run") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description="Run a DML-under-label-noise study.")
    p.add_argument("spec", help="YAML study spec")
    p.add_argument("--no-dashboard", action="store_true", help="do not build the comparison dashboard at the end")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value by dotted key, e.g. --set train.epochs=3 (repeatable)",
    )
    p.add_argument("--resume", action="store_true", help="continue an existing study of this name")
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster address, or `warm` for the head `dmlstudy up` started (default: $RAY_ADDRESS, else local)",
    )
    p.add_argument(
        "--max-failures",
        type=max_failures,
        default=RunOptions.max_failures,
        metavar="N",
        help="restart a failed trial from its last checkpoint up to N times (-1: always); a NaN loss is never retried",
    )
    p.add_argument(
        "--shared-storage",
        action="store_true",
        help="the local `storage` path is shared by every node (skips the multi-node check)",
    )
    p.add_argument(
        "--pending-timeout",
        type=float,
        default=RunOptions.pending_timeout_s,
        metavar="SECONDS",
        help="fail the study when its trials have waited this long for resources no node has (0: wait forever)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=RunOptions.drain_timeout_s,
        metavar="SECONDS",
        help="on a stop signal, wait this long for running trials to reach their next checkpoint, then stop (exit 3); "
        f"on SIGTERM and Ctrl-C at most {stopping.URGENT_DRAIN_S:g} s (Slurm's KillWait follows SIGTERM)",
    )
    p.add_argument("--status", action="store_true", help="print the study's progress and exit; starts nothing")
    p.add_argument(
        "--plan",
        action="store_true",
        help="measure a trial of each arm here, print the priced size line and exit; starts nothing",
    )
    return p


#: The name of the Ray temp dir a ``dmlstudy slurm`` job starts its own Ray in (``$TMPDIR/dmlray-$SLURM_JOB_ID``:
#: study/deploy/templates/slurm.sbatch.sh; a test holds the two to the same name).
SLURM_JOB_RAY_DIR = "dmlray-{job_id}"


def job_private_address(address: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``address`` is the private Ray head of the ``dmlstudy slurm`` job this driver runs in: the job script
    starts the driver with ``--address "$RAY_ADDRESS"`` and its Ray in its own temp dir. That Ray ends with the run,
    so a continue line naming it is dead by the time it is read; the job prints the line that continues the study
    (``dmlstudy slurm``'s own) after the driver's."""
    job_id = environ.get("SLURM_JOB_ID")
    tmpdir = environ.get("RAY_TMPDIR", "")
    return (
        job_id is not None
        and address == environ.get("RAY_ADDRESS")
        and Path(tmpdir).name == SLURM_JOB_RAY_DIR.format(job_id=job_id)
    )


class Invocation:
    """One invocation of the command line: the commands that repeat or continue it (every option that locates and
    shapes the study, ``--set`` overrides included, shell-quoted, passwords masked), its study directory once known,
    and its last words: the line saying how to continue, and what it achieved (:class:`RunProgress`)."""

    def __init__(self, prog: str, args: argparse.Namespace) -> None:
        self.prog = prog
        self.args = args
        self.layout: StudyLayout | None = None
        #: Why it stopped, for its last line (``stopped on SIGUSR1 before the study started``).
        self.reason = ""
        self.said = False

    def command(self, resume: bool) -> str:
        """This command line again, with ``--resume`` or without."""
        a, defaults = self.args, RunOptions()
        words = [a.spec, *(w for override in a.overrides for w in ("--set", override))]
        if a.address and not job_private_address(a.address):
            words += ["--address", a.address]
        if a.max_failures != defaults.max_failures:
            words += ["--max-failures", str(a.max_failures)]
        if a.shared_storage:
            words.append("--shared-storage")
        if a.pending_timeout != defaults.pending_timeout_s:
            words += ["--pending-timeout", f"{a.pending_timeout:g}"]
        if a.drain_timeout != defaults.drain_timeout_s:
            words += ["--drain-timeout", f"{a.drain_timeout:g}"]
        if a.no_dashboard:
            words.append("--no-dashboard")
        if resume:
            words.append("--resume")
        return shell_command([*self.prog.split(), *words])

    def study_exists(self) -> bool:
        """Whether the study's ``spec.yaml`` exists (what a job script decides ``--resume`` by)."""
        if self.layout is None:
            return False
        try:
            return read_bytes(self.layout.spec_file) is not None
        except OSError:
            return True  # unreadable now: it was there to be found; --resume says if it is not

    def continue_line(self, interrupted: str = "") -> str:
        """The last line of a run that did not finish: why, then the command that continues it."""
        # No signal: the driver ended itself (its private Ray died: study.runtime.watchdog), having said why.
        why = self.reason or interrupted or (f"stopped on {name}" if (name := stopping.received()) else "stopped")
        if self.study_exists():
            return f"{why}; continue it with: {self.command(resume=True)}"
        return f"{why}; nothing was started: run the same command again: {self.command(resume=False)}"

    def wall(self, outcome: StudyOutcome) -> RunWall:
        """The whole run's wall: this driver's (search start to final end) and, after ``--resume``, every earlier
        driver's as they recorded it (none on a remote storage)."""
        root = None if self.layout is None or self.layout.remote else self.layout.root
        return run_wall(root, outcome.wall_time_s, self.args.resume)

    def last_words(self, code: int) -> None:
        """As the driver exits with ``code``: the continue line after a stop (once), and the run's progress in its
        study directory (any exit but 2, bad input, once the directory exists; not on a remote storage)."""
        if code == stopping.EXIT_STOPPED and not self.said:
            self.said = True
            print(self.continue_line(), flush=True)
        if code == 2 or self.args.status or self.layout is None or self.layout.remote:
            return
        if Path(self.layout.root).is_dir():
            try:
                progress = run_meter().progress(stopping.received(), code)
                write_run_progress(self.layout.root, progress)
                # A lost record only makes a later report's whole-run wall say "recorded part": nothing to warn of.
                with contextlib.suppress(OSError):
                    append_driver_wall(self.layout.root, progress, self.args.resume)
            except OSError as e:  # a full disk: the exit code still says what happened
                if code == stopping.EXIT_STOPPED:  # a job script would requeue on it: say why it will not
                    print(f"warning: {R.RUN_PROGRESS_FILE} could not be written: {e.strerror}", file=sys.stderr)
                # (after exit 1 the store's own error is the one line the CLI promises, and nothing is requeued)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The command line's options of a run, as :func:`study.search.driver.run_study` takes them."""
    return RunOptions(
        resume=args.resume,
        address=args.address,
        max_failures=args.max_failures,
        shared_storage=args.shared_storage,
        pending_timeout_s=args.pending_timeout,
        drain_timeout_s=args.drain_timeout,
    )


def interrupted(run: Invocation, what: str, outcome: StudyOutcome, interrupted: str) -> int:
    """A stop, or an interrupted fit: where the study or table stands, no result yet; exit 3 after a stop signal (the
    continue line is then the run's last, :meth:`Invocation.last_words`), else 1 with the continue line."""
    print(progress_line(what, outcome))
    for trial_id, reason in outcome.failures:
        print(f"  failed: trial {trial_id}: {reason}")
    if stopping.received() is not None:
        return stopping.EXIT_STOPPED
    print(run.continue_line(interrupted))
    return 1


def progress_line(what: str, outcome: StudyOutcome) -> str:
    """Where a study that did not finish stands: its stage, the trials that ended, those a stop left mid-way."""
    stopped = f" on {name}" if (name := stopping.received()) is not None else ""
    p = outcome.progress
    if p is None:
        return f"{what} stopped{stopped} after {outcome.wall_time_s:.0f} s; no result yet"
    parts = [f"{p.trials - p.unfinished} of {p.planned} trials ended ({p.failed} failed)"]
    if p.unfinished:
        parts.append(f"{p.unfinished} stopped mid-way")
    if p.planned > p.trials:
        parts.append(f"{p.planned - p.trials} not started")
    return f"{what} stopped{stopped} in its {p.stage} stage after {outcome.wall_time_s:.0f} s: " + (
        ", ".join(parts) + "; no result yet"
    )

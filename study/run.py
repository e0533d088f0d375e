"""Command line: ``python -m study.run SPEC.yaml|TABLE.yaml [--set key=value ...] [--resume] [--address RAY_ADDRESS]
[--max-failures N] [--shared-storage] [--pending-timeout S] [--drain-timeout S] [--status] [--plan]``.

``--plan`` measures what a trial of each arm costs on this machine (:mod:`study.search.calibration`), prints the priced
size line and exits 0, starting nothing (no Ray, no store). A table's run prices its size line the same way before it
starts (unless the spec sets ``search.epoch_seconds``, or it resumes) and refuses one over ``search.max_hours``.

A TABLE.yaml (a spec naming ``arms``: :mod:`study.table.run`, docs/tables.md) runs a whole paper table. A study is a
table of one cell: the spec's intake decides once which it is (:func:`study.table.spec.load_run`), and both take one
path to the one driver (:func:`study.search.driver.run_study`) and their report.

Exit codes:

- 0: the study finished: every trial trained all the epochs its scheduler allowed (or failed) and the final stage
  is complete;
- 2: invalid spec or command line (one line on stderr, nothing started);
- 1: the study itself failed (every trial failed, or it was interrupted without a stop signal, or a store could not
  be written: disk full, read-only, permission lost; one line naming the store and the remedy);
- 3: the study stopped on a signal before it finished (``SIGUSR1``: a batch job's time limit is near; ``SIGTERM``:
  preemption, ``scancel``, ``timeout``; ``SIGINT``: Ctrl-C): no new trial was started, the running ones reached their
  next checkpoint (or the drain's bound passed: :mod:`study.runtime.stopping`), Ray's experiment state and the stores
  are saved and the MLflow runs are KILLED, not FAILED; the last line is the command that continues it (with
  ``--resume``, or, when nothing was started, the same command again). ``dmlstudy slurm`` requeues the job that
  does: :mod:`study.deploy.slurm`.

Every exit of a run that reached its study directory writes what the run achieved there
(:mod:`study.runtime.run_progress`: epochs checkpointed, start-up and epoch seconds, the stop signal, the exit code).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from study.arguments import ArgumentParser, max_failures, one_line
from study.final.intervals import few_seeds_warning, replicated_mean, t_interval
from study.layout import StudyLayout
from study.runtime import stopping
from study.runtime.compat import finish_threads
from study.runtime.run_progress import (
    RunWall,
    append_driver_wall,
    run_meter,
    run_wall,
    start_run_meter,
    write_run_progress,
)
from study.runtime.storage import read_bytes
from study.runtime.store_errors import store_failure
from study.search.calibration import calibrate
from study.search.context import RunOptions
from study.status import print_run_status
from study.table.bill import Bill, calibrate_table, study_bill, study_priced, study_size_line
from study.table.spec import RunSpec, load_run
from study.tracking.credentials import shell_command
from trainables.schema import record as R
from trainables.schema.errors import StudyError, StudyStalledError
from trainables.schema.metric_names import bounds_of

if TYPE_CHECKING:
    from study.search.driver import StudyOutcome
    from trainables.schema.spec import StudySpec

__all__ = ["main"]

#: The driver's start (this module is the first the command line imports): a run's start-up is counted from here.
_STARTED = time.time()


def _parser(prog: str = "python -m study.run") -> argparse.ArgumentParser:
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
    p.add_argument("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else local)")
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


def _job_private_address(address: str, environ: Mapping[str, str] = os.environ) -> bool:
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


class _Run:
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
        if a.address and not _job_private_address(a.address):
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


def main(argv: list[str] | None = None, prog: str = "python -m study.run") -> int:
    args = _parser(prog).parse_args(argv)
    run = _Run(prog, args)
    if not args.status:
        start_run_meter(_STARTED if argv is None else time.time())
        # SIGUSR1/SIGTERM/SIGINT stop the study for --resume (exit 3) instead of killing it.
        stopping.install(last_words=run.last_words)
    code = 1  # an exception that escapes: Python exits 1
    try:
        code = _main(args, run)
    finally:
        run.last_words(code)
    return code


def _main(args: argparse.Namespace, run: _Run) -> int:
    """One path for a study and a table: the spec's intake decides once what it is (:func:`study.table.spec.load_run`,
    a study being a table of one cell), then the one driver runs its plan and the report says what it found."""
    target = None
    try:
        target = load_run(args.spec, args.overrides, family_rules=not args.status)  # --status imports no trainer
        if args.status:
            return print_run_status(target)
        if args.plan:
            print(_plan_line(target), flush=True)
            return 0
        bill = _bill(target, args.resume)
        if target.table is not None:
            target.table.check_budget(bill)  # before anything starts, a table over search.max_hours is one line
            print(target.table.size_line(bill), flush=True)
        elif bill is not None or target.base.search.replicates > 1:
            study_priced(target.base).check(bill, target.base.search.max_hours, "study")  # likewise
            print(study_size_line(target.base, bill), flush=True)
        from study.table.run import run_plan  # defers Ray and torch: bad input is answered without them

        run.layout = StudyLayout.for_spec(target.base)
        outcome = run_plan(target, options=_run_options(args), on_start=lambda: _warn_selection(target.base))
    except StudyStalledError as e:  # the study started and could not go on: it failed
        _print_error(e)
        return 1
    except stopping.StudyStopped as e:
        run.reason = str(e)
        return stopping.EXIT_STOPPED
    except KeyboardInterrupt:  # Ctrl-C twice, outside Tune's loop (inside it, the driver ends itself: RayLossWatch)
        if not stopping.stopping():
            raise
        run.reason = f"stopped on {stopping.received()}, then Ctrl-C again"
        return stopping.EXIT_STOPPED
    except StudyError as e:
        _print_error(e)
        return 2
    except Exception as e:
        if target is None or (line := _store_failure(e, target.base)) is None:
            raise
        print(f"error: {one_line(line)}", file=sys.stderr)
        return 1
    return _report(args, run, target, (outcome, bill))


def _bill(target: RunSpec, resume: bool) -> Bill | None:
    """The bill before the run starts: measured here (seconds; a ResNet-50 on CUB: a minute or two), or the spec's
    assumed ``epoch_seconds``. A table is measured always; a study when it sets ``search.max_hours`` (what it is
    bounded by: a study without one starts at once, as before, and ``--plan`` prices it). A resumed run is not
    measured again (it is under way: its report then has no bill unless assumed)."""
    table, spec = target.table, target.base
    if table is not None:
        if resume or table.spec.search.epoch_seconds is not None:
            return table.bill()
        return table.bill(calibrate_table(table.cells))
    if resume or spec.search.epoch_seconds is not None or spec.search.max_hours is None:
        return study_bill(spec, None)
    return study_bill(spec, calibrate({spec.family: spec}))


def _plan_line(target: RunSpec) -> str:
    """``--plan``: the size line priced from a calibration on this machine; where the spec assumes
    ``search.epoch_seconds`` (what its run is priced by), that bill too, and the refusal a run would meet over
    ``search.max_hours``."""
    table = target.table
    if table is None:
        spec = target.base
        measured = study_bill(spec, calibrate({spec.family: spec}))
        lines = [study_size_line(spec, measured)]
        if (assumed := study_bill(spec, None)) is not None:
            lines.append(f"the spec's assumed bill, which its run uses: {study_size_line(spec, assumed)}")
        try:
            study_priced(spec).check(assumed or measured, spec.search.max_hours, "study")
        except StudyError as e:
            lines.append(f"the run would be refused: {one_line(str(e))}")
        return "\n".join(lines)
    measured = table.bill(calibrate_table(table.cells))
    lines = [table.size_line(measured)]
    if (assumed := table.bill()) is not None:
        hours = f"FIFO ≈ {table.estimated_hours(False, assumed):.1f} h"
        if table.scheduled:
            hours += f", with {table.spec.search.scheduler.type} ≈ {table.estimated_hours(True, assumed):.1f} h"
        lines.append(f"the spec's assumed bill, which its run uses: {hours} {assumed.unit_text()}")
    try:
        table.check_budget(assumed or measured)
    except StudyError as e:
        lines.append(f"the run would be refused: {one_line(str(e))}")
    return "\n".join(lines)


def _report(args: argparse.Namespace, run: _Run, target: RunSpec, result: tuple[StudyOutcome, Bill | None]) -> int:
    """After the driver returned: where a run that did not finish stands, else what it found (a study's best trial
    and final stage, a table's comparison), then where to browse it."""
    spec, (outcome, bill) = target.base, result
    what = f"{'Study' if target.table is None else 'Table'} {spec.name!r}"
    print()
    if outcome.interrupted:
        return _interrupted(run, what, outcome, f"the {what.split()[0].lower()} was interrupted")
    print(f"{what}: {outcome.num_trials} trials ({outcome.num_failed} failed) in {outcome.wall_time_s:.0f} s")
    for trial_id, reason in outcome.failures:
        print(f"  failed: trial {trial_id}: {reason}")
    if target.table is None:
        _print_best(spec, outcome)
        _print_study_costs(run, target, outcome, bill)
    elif outcome.final and not _print_table_report(run, target, outcome, bill):
        return 1
    from study.search.driver import browse_commands  # defers Ray (imported by the run by now; not by --status)

    print("Browse the results:")
    for command in browse_commands(spec, outcome.experiment_id):
        print(f"  {command}")
    if not args.no_dashboard and outcome.num_trials > outcome.num_failed:
        # Deferred (polars, the dashboards: after the run only); it warns, never raises: the study is already done.
        from dashboards.build import build_after_study

        if (page := build_after_study(spec)) is not None:
            print(f"  open {page}")
    return 0 if outcome.succeeded else 1


def _print_best(spec: StudySpec, outcome: StudyOutcome) -> None:
    """A study's best search trial (the final stage's pick: never one a scheduler stopped early) and its final stage;
    with replicates, each replicate's winner, the first being the study's own (replicate 0)."""
    if outcome.best_value is not None:
        of = " (replicate 0)" if len(outcome.cell_bests) > 1 else ""
        print(f"Best trial{of} {outcome.best_trial_id}: {spec.search.metric} = {outcome.best_value:.4f}")
        for name, value in outcome.best_params.items():
            print(f"  {name} = {value}")
        for label, (trial_id, value) in sorted(outcome.cell_bests.items(), key=lambda c: R.replicate_of(c[0])):
            if label != spec.name:
                print(f"Best trial (replicate {R.replicate_of(label)}) {trial_id}: {spec.search.metric} = {value:.4f}")
    if outcome.final:
        _print_final(outcome.final)
        if len(outcome.final) > 1 and spec.search.replicates > 1:
            _print_replicated(outcome.final)


def _print_replicated(groups: list) -> None:
    """A replicated study's final stage over all its replicates: each test metric's mean over replicates × seeds with
    its crossed replicates × seeds t-interval (:func:`study.final.intervals.replicated_mean`), and the replicates'
    spread."""
    print(
        f"Over the {len(groups)} replicates (each search's winner on the same seeds; 95 % interval: Student's t over "
        "replicates and seeds, at the smaller one's degrees of freedom):"
    )
    for name in sorted(groups[0].by_seed):
        if not name.removeprefix("test/").startswith(("recall_at_1", "map_at_r", "nmi")):
            continue
        pooled = replicated_mean([g.by_seed.get(name, {}) for g in groups], bounds_of(name))
        if pooled is None:
            continue
        mean, low, high, seeds = pooled
        means = [sum(g.by_seed[name].values()) / len(g.by_seed[name]) for g in groups if g.by_seed.get(name)]
        print(
            f"    {name} = {mean:.4f} [{low:.4f}, {high:.4f}] over {len(groups)} replicates × {seeds} seeds; "
            f"replicates' means {min(means):.4f} to {max(means):.4f} (the search's own spread {max(means) - min(means):.4f})"
        )


def _print_study_costs(run: _Run, target: RunSpec, outcome: StudyOutcome, bill: Bill | None) -> None:
    """Under a priced study (a bill before it started, or replicates): its slot use and the bill against the actual
    cost, as under a table (:func:`dashboards.table_report.study_cost_report`); a study with neither prints none."""
    if (bill is None and target.base.search.replicates == 1) or run.layout is None:
        return
    from dashboards.table_report import study_cost_report  # defers polars and the dashboards: after the run only

    try:
        lines = study_cost_report(target.plan, run.layout.root, (bill, run.wall(outcome)))
    except Exception as e:  # the study is done and stored: lines about its cost must not fail it
        print(
            f"warning: the study's cost was not read back: {type(e).__name__}: {one_line(str(e))[:300]}",
            file=sys.stderr,
        )
        return
    for line in lines:
        print(line)


def _print_table_report(run: _Run, target: RunSpec, outcome: StudyOutcome, bill: Bill | None) -> bool:
    """A table's comparison, written to its directory and printed; ``False`` (one line said why) when it could not be
    written: the runs are stored, and ``--resume`` writes it again."""
    from dashboards.table_report import write_table_report  # defers polars and the dashboards: after the run only

    assert target.table is not None and run.layout is not None
    try:
        where, text = write_table_report(
            target.table, run.layout, outcome.parent_run_id, bill=(bill, run.wall(outcome))
        )
    except Exception as e:
        line = _store_failure(e, target.base) or f"{type(e).__name__}: {one_line(str(e))[:500]}"
        print(
            f"error: the table's report could not be written to {run.layout.root}: {line}; its runs are stored, "
            f"and {run.command(resume=True)} writes it again",
            file=sys.stderr,
        )
        return False
    print()
    print(text)
    print(f"Written to {where}")
    return True


def _run_options(args: argparse.Namespace) -> RunOptions:
    """The command line's options of a run, as :func:`study.search.driver.run_study` and
    :func:`study.table.run.run_table` both take them."""
    return RunOptions(
        resume=args.resume,
        address=args.address,
        max_failures=args.max_failures,
        shared_storage=args.shared_storage,
        pending_timeout_s=args.pending_timeout,
        drain_timeout_s=args.drain_timeout,
    )


def _interrupted(run: _Run, what: str, outcome: StudyOutcome, interrupted: str) -> int:
    """A stop, or an interrupted fit: where the study or table stands, no result yet; exit 3 after a stop signal (the
    continue line is then the run's last, :meth:`_Run.last_words`), else 1 with the continue line."""
    print(_progress_line(what, outcome))
    for trial_id, reason in outcome.failures:
        print(f"  failed: trial {trial_id}: {reason}")
    if stopping.received() is not None:
        return stopping.EXIT_STOPPED
    print(run.continue_line(interrupted))
    return 1


def _progress_line(what: str, outcome: StudyOutcome) -> str:
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


def _print_error(e: BaseException) -> None:
    """The error as the one line the CLI promises: newlines folded, a URL's password masked."""
    print(f"error: {one_line(str(e))}", file=sys.stderr)


def _store_failure(e: Exception, spec: StudySpec) -> str | None:
    """The one line for a disk-full / read-only / permission failure of a store (see :mod:`study.runtime.store_errors`)."""
    layout = StudyLayout.for_spec(spec)
    return store_failure(e, {"mlflow": layout.tracking_uri, "optuna": layout.optuna_url, "storage": layout.root})


def _warn_selection(spec: StudySpec) -> None:
    """Once the study is about to start (bad input still gets its one line alone): say when it selects on test, and
    when its final stage has too few seeds for its interval to say anything."""
    if not spec.validation.enabled:
        print(
            "warning: validation.kind is none: hyperparameters are selected on the test classes "
            "(runs are tagged selection=test); use validation.kind: kfold or holdout for an honest study",
            file=sys.stderr,
        )
    if line := few_seeds_warning(spec.final.seeds):
        print(line, file=sys.stderr)


def _print_final(groups: list) -> None:
    """The final test stage: per group, each test metric's mean ± std [95 % CI] over the seeds."""
    print("Final test stage (best configuration retrained on all training classes, evaluated on the test classes):")
    for g in groups:
        print(f"  {g.label} (from trial {g.source_trial}, {g.num_seeds} seeds)")
        for name in sorted(g.values):
            if name.removeprefix("test/").startswith(("recall_at_1", "map_at_r", "nmi")):
                s = g.summary()
                print(
                    f"    {name} = {s[name + '_mean']:.4f} ± {s[name + '_std']:.4f} "
                    f"[{s[name + '_ci95_low']:.4f}, {s[name + '_ci95_high']:.4f}]"
                )
        for name, value in sorted(g.fold_ensemble.items()):
            if name.removeprefix("test/").startswith("recall_at_1"):
                print(f"    fold ensemble {name} = {value:.4f}")
        if rows := g.per_category():
            print("    per category (mean ± std [95 % CI] over the seeds):")
            for category, metric, vals in rows:
                mean, std, low, high = t_interval(vals, bounds_of(metric))
                print(f"      {category:<16} {metric:<12} {mean:.4f} ± {std:.4f} [{low:.4f}, {high:.4f}]")


def _exit(code: int) -> NoReturn:
    """Exit with ``code`` without Python's module teardown.

    Once ``main`` returns, every store has committed (MLflow and Optuna write through SQL transactions, Ray's state
    is synced and Ray shut down), yet finalising the interpreter's modules (torch, Ray's gRPC core, faiss, MLflow)
    takes 2-3 s more on a quiet 2-core machine: the largest part of a small study's tail
    (``python -m benchmarks.driver_timeline``). What Python would still do that matters is done here, in its order:
    join non-daemon threads, run the ``atexit`` handlers (temporary directories, loggers), flush the streams.
    """
    finish_threads()  # study.runtime.compat: what Py_Finalize runs first
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())

"""Command line: ``python -m study.run SPEC.yaml|TABLE.yaml [--set key=value ...] [--resume] [--address RAY_ADDRESS]
[--max-failures N] [--shared-storage] [--pending-timeout S] [--drain-timeout S] [--status] [--plan]``.

``--plan`` measures what a trial of each arm costs on this machine (:mod:`study.search.calibration`), prints the priced
size line and exits 0, starting nothing (no Ray, no store). A table's run prices its size line the same way before it
starts (unless the spec sets ``search.epoch_seconds``, or it resumes) and refuses one over ``search.max_hours``.

A TABLE.yaml (a spec naming ``arms``: docs/notebook/tables.md) runs a whole paper table. A study is a table of one arm: the
spec's intake decides once which it is (:func:`study.intake.load.load_plan`), and from its plan on nothing asks again:
one bill (:mod:`study.bill`), one driver (:func:`study.search.driver.run_study`), one report
(:func:`dashboards.report.report`). The command line, its continue lines and its last words are
:mod:`study.commands.invocation`.

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
(:mod:`study.runtime.driver_run`: epochs checkpointed, start-up and epoch seconds, the stop signal, the exit code).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from study.arguments import one_line
from study.bill import Bill, bill_of, calibrate_plan, run_bill, size_line
from study.commands.invocation import Invocation, interrupted, parser, run_options
from study.commands.status import print_status
from study.final.intervals import few_seeds_warning
from study.intake.layout import StudyLayout
from study.intake.load import load_plan
from study.runtime import stopping
from study.runtime.compat import finish_threads
from study.runtime.driver_run import start_run_meter
from study.runtime.store_errors import store_failure
from study.tracking.credentials import check_tracking_env
from study.tracking.preflight import preflight_stores
from trainables.schema.errors import StudyError, StudyStalledError

if TYPE_CHECKING:
    from study.intake.plan import StudyPlan
    from study.search.outcome import StudyOutcome
    from trainables.schema.spec import StudySpec

__all__ = ["main"]

#: The driver's start (this module is the first the command line imports): a run's start-up is counted from here.
_STARTED = time.time()


def main(argv: list[str] | None = None, prog: str = "python -m study.run") -> int:
    args = parser(prog).parse_args(argv)
    run = Invocation(prog, args)
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


def _main(args: argparse.Namespace, run: Invocation) -> int:
    """The spec's intake decides once what it is (a study being a table of one arm), then its bill, the one driver on
    its plan, and the report of what it found."""
    plan = None
    try:
        plan = load_plan(args.spec, args.overrides, family_rules=not args.status)  # --status imports no trainer
        if args.status:
            return print_status(plan)
        if args.plan:
            print(_plan_lines(plan), flush=True)
            return 0
        bill = _bill(plan, args.resume)  # before anything starts, a run over search.max_hours is one line
        if bill is not None or len(plan.cells) > 1:
            print(size_line(plan, bill), flush=True)
        run.layout = StudyLayout.for_spec(plan.base)
        check_tracking_env(plan.base)
        preflight_stores(run.layout, plan.base.name)  # a store that does not answer is one line, before torch and Ray
        from study.search.driver import run_study  # defers Ray and torch: bad input is answered without them

        options = dataclasses.replace(run_options(args), stores_checked=True)
        outcome = run_study(plan, options=options, on_start=lambda: _warn_selection(plan.base))
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
        if plan is None or (line := _store_failure(e, plan.base)) is None:
            raise
        print(f"error: {one_line(line)}", file=sys.stderr)
        return 1
    return _report(args, run, plan, (outcome, bill))


def _bill(plan: StudyPlan, resume: bool) -> Bill | None:
    """The bill before the run starts, checked against ``search.max_hours`` (:func:`study.bill.run_bill`): measured
    here (seconds; a ResNet-50 on CUB: a minute or two), or the spec's assumed ``epoch_seconds``. Measured when the
    run has more than one cell or sets ``search.max_hours`` (what it is bounded by: a plain study starts at once, and
    ``--plan`` prices it); a resumed run is not measured again (it is under way: its report then has no bill unless
    assumed)."""
    measure = not resume and plan.epoch_seconds is None and (plan.max_hours is not None or len(plan.cells) > 1)
    return run_bill(plan, calibrate_plan(plan) if measure else None)


def _plan_lines(plan: StudyPlan) -> str:
    """``--plan``: the size line priced from a calibration on this machine; where the spec assumes
    ``search.epoch_seconds`` (what its run is priced by), that bill too, and the refusal a run would meet over
    ``search.max_hours``."""
    calibration = calibrate_plan(plan)
    lines = [size_line(plan, bill_of(plan, calibration))]
    if (assumed := bill_of(plan)) is not None:
        lines.append(f"the spec's assumed bill, which its run uses: {size_line(plan, assumed)}")
    try:
        run_bill(plan, calibration)
    except StudyError as e:
        lines.append(f"the run would be refused: {one_line(str(e))}")
    return "\n".join(lines)


def _report(
    args: argparse.Namespace, run: Invocation, plan: StudyPlan, result: tuple[StudyOutcome, Bill | None]
) -> int:
    """After the driver returned: where a run that did not finish stands, else what it found
    (:func:`dashboards.report.report`), then where to browse it."""
    spec, (outcome, bill) = plan.base, result
    what = f"{plan.noun.capitalize()} {spec.name!r}"
    print()
    if outcome.interrupted:
        return interrupted(run, what, outcome, f"the {plan.noun} was interrupted")
    print(f"{what}: {outcome.num_trials} trials ({outcome.num_failed} failed) in {outcome.wall_time_s:.0f} s")
    for trial_id, reason in outcome.failures:
        print(f"  failed: trial {trial_id}: {reason}")
    from dashboards.report import report  # defers polars and the dashboards: after the run only

    assert run.layout is not None
    try:
        report(plan, run.layout, outcome, (bill, run.wall(outcome)))
    except Exception as e:
        line = _store_failure(e, spec) or f"{type(e).__name__}: {one_line(str(e))[:500]}"
        print(
            f"error: the {plan.noun}'s report could not be written to {run.layout.root}: {line}; its runs are stored, "
            f"and {run.command(resume=True)} writes it again",
            file=sys.stderr,
        )
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

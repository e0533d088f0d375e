"""``python -m study.run TABLE.yaml``: a paper table as one study (docs/tables.md).

Every arm × condition cell is searched by its own Optuna study (``<table>.<arm>.<condition>`` in the table's Optuna
storage) with ``search.num_trials`` trials, all cells' trials in **one** Ray Tune experiment whose searcher
dispatches to the cells (:class:`study.table.search.TableSearch`; why one experiment: that module's docstring), so
they share the cluster under the table's ``max_concurrent`` and the table resumes as a whole at trial granularity.
Then each cell's best configuration (:func:`study.final.best.pick_best`) is retrained with the final seeds (noise reseeded
per seed: the arms are paired) by the study's own final stage, as one group per cell. Everything else is
:func:`study.search.driver.run_study` on the table's base spec (:mod:`study.table.spec`): the lock, the resume checks, the
MLflow parent run and callbacks, the final stage. The comparison table is rendered by :mod:`dashboards.table_report`.

Files beside a study's (:mod:`study.layout`): ``table.yaml`` (the table spec it was started with; a resume refuses
another), ``spec.yaml`` (its base spec, so ``dashboards.compare.cli`` reads the directory like any study's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml

from study.layout import StudyLayout
from study.runtime.storage import read_bytes, write_bytes
from study.search.context import RunOptions, SearchPlan, StudyContext
from study.search.driver import StudyOutcome, run_study
from study.search.halving import HalvingScheduler
from study.search.resume import OPERATIONAL_KEYS
from study.search.tuners import stage_tuner, study_searcher
from study.table.scheduler import CellASHA
from study.table.search import TableSearch
from study.table.spec import Table, cell_of
from study.tracking.callback import MlflowTrialCallback
from study.tracking.credentials import redacted_spec
from study.tracking.preflight import preflight_stores
from trainables.schema import record as R
from trainables.schema.errors import StudyExistsError
from trainables.schema.space import SchedulerSpec
from trainables.schema.trial import flatten

if TYPE_CHECKING:
    from ray.tune.schedulers import TrialScheduler

__all__ = ["run_table", "table_plan", "table_searcher", "table_scheduler"]


def _table_text(table: Table) -> bytes:
    return yaml.safe_dump(redacted_spec(table.spec), sort_keys=False).encode()  # type: ignore[arg-type]


def _check_saved_table(table: Table, layout: StudyLayout, resume: bool) -> None:
    """A resumed table keeps the spec it was started with, except what says how to run it, not what it is (as a
    study's resume: :data:`study.search.resume.OPERATIONAL_KEYS`, e.g. ``tracking.outage_budget_s``)."""
    saved = read_bytes(layout.table_file)
    if not resume or saved is None:
        return
    # A table started before tables took a scheduler saved none: it ran FIFO, today's default.
    before_schedulers = flatten({"search": {"scheduler": SchedulerSpec().model_dump(mode="json")}})
    old = {**before_schedulers, **flatten(yaml.safe_load(saved) or {})}
    new = flatten(yaml.safe_load(_table_text(table)))
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in OPERATIONAL_KEYS)
    if changed:
        raise StudyExistsError(
            f"--resume: the table differs from the one {table.spec.name!r} was started with at "
            f"{', '.join(changed[:5])}; a resumed table must keep its spec"
        )


def table_searcher(table: Table, layout: StudyLayout) -> TableSearch:
    """The table's searcher: one study searcher per cell (:func:`study.search.tuners.study_searcher`: the guarded Optuna
    storage, the ordered sampler with the table's :attr:`~study.table.spec.Table.cell_lag`), ``num_trials`` each."""
    s = table.base.search
    cells = [(c.label, c.fixed, study_searcher(c.spec, layout, c.study_name, table.cell_lag)) for c in table.cells]
    return TableSearch(cells, table.spec.search.num_trials, s.metric, s.mode, trials_dir=layout.tune_dir)


def table_scheduler(table: Table, layout: StudyLayout) -> TrialScheduler:
    """FIFO; with ``search.scheduler.type: halving`` synchronous successive halving per cell
    (:class:`~study.search.halving.HalvingScheduler`); or with ``asha`` one ASHA rung set per cell (:class:`~study.table.scheduler.CellASHA`:
    a trial is compared with its own cell's trials only), its rungs kept in the study directory across resumes."""
    from ray.tune.schedulers import FIFOScheduler

    s = table.spec.search
    if s.scheduler.type == "halving":  # synchronous successive halving, rungs per cell (docs/tables.md)
        return HalvingScheduler(
            [(c.label, c.fixed) for c in table.cells],
            budget=s.num_trials,
            metric=table.base.search.metric,
            mode=s.mode,
            max_t=table.spec.train.epochs,
            first_rung=s.scheduler.first_rung,
            reduction_factor=s.scheduler.reduction_factor,
            hedge=s.scheduler.hedge,
            state_file=layout.asha_state,
        )
    if s.scheduler.type != "asha":
        return FIFOScheduler()
    return CellASHA(
        [(c.label, c.fixed) for c in table.cells],
        metric=table.base.search.metric,
        mode=s.mode,
        max_t=table.spec.train.epochs,
        grace_period=s.scheduler.grace_period,
        reduction_factor=s.scheduler.reduction_factor,
        state_file=layout.asha_state,
    )


def table_plan(table: Table) -> SearchPlan:
    """The table's search stage for :func:`study.search.driver.run_study`."""
    from study.runtime.watchdog import PendingTimeout
    from study.table.progress import TableProgress

    spec = table.base

    def tuner(context: StudyContext, param_space: dict[str, Any], callback: MlflowTrialCallback) -> Any:
        def search_config() -> dict[str, Any]:
            searcher = table_searcher(table, context.layout)
            return {
                "metric": spec.search.metric,
                "mode": spec.search.mode,
                "search_alg": searcher,
                "scheduler": table_scheduler(table, context.layout),
                # The searcher ends the experiment (Searcher.FINISHED) once every cell has its budget; Ray's own
                # limit leaves room for the replacements of lost trials.
                "num_samples": searcher.max_trials,
            }

        callbacks = [callback, TableProgress(table), PendingTimeout(context.options.pending_timeout_s)]
        config = None if context.resuming else search_config
        return stage_tuner(context, R.SEARCH_EXPERIMENT, param_space, callbacks, config)

    def group(config: dict[str, Any]) -> str | None:
        cell = cell_of(table.cells, config)
        return None if cell is None else cell.label

    return SearchPlan(tuner=tuner, group=group)


def run_table(
    table: Table, *, options: RunOptions | None = None, on_start: Callable[[], None] | None = None
) -> StudyOutcome:
    """Run (or resume) the table to its final stage; raises :class:`~trainables.schema.errors.StudyError` before anything is
    written for bad input, a budget over ``search.max_hours``, or a resumed table whose spec changed."""
    options = RunOptions() if options is None else options
    table.check_budget()
    layout = StudyLayout.for_spec(table.base)
    # The study's pre-flight of its stores (run_study repeats it: cheap, and idempotent), before the table reads its
    # own file there: an unreachable bucket or server is one line and exit 2, as for a study.
    preflight_stores(layout, table.base.name)
    _check_saved_table(table, layout, options.resume)

    def started() -> None:
        if on_start is not None:
            on_start()
        layout.mkdir()
        if read_bytes(layout.table_file) is None:
            write_bytes(layout.table_file, _table_text(table))

    return run_study(table.base, options=options, on_start=started, plan=table_plan(table))

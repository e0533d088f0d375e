"""The Ray Tune ``Tuner`` of each stage of a run, wired once (:func:`stage_tuner`): the search (:func:`search_tuner`,
built from the run's plan, :mod:`study.intake.plan`: one dispatching searcher over the cells' Optuna studies, one scheduler
with rungs per cell, the plan's live view) and the stages after it (:func:`grid_tuner`: a grid over their points,
such as the best configurations' seeds). Each restores its experiment when a driver resumes."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from study.intake.layout import StudyLayout
from study.intake.plan import VIEW_CELLS, StudyPlan
from study.progress import CellProgress, ProgressTable, TrialColumns
from study.runtime.checkpoint_repair import CheckpointRepair
from study.runtime.compat import restored_run_config, restored_searcher
from study.runtime.driver_run import run_meter
from study.runtime.stop_callback import StageLedger, StopOnSignal
from study.runtime.watchdog import PendingTimeout
from study.search.cell_search import CellBudget, CellSearch
from study.search.context import StudyContext
from study.search.old_names import accept_old_names
from study.search.ordered_sampler import OrderedSampler
from study.search.reconcile import ReconcileTrials
from study.search.schedulers import build_scheduler
from study.search.space import make_sampler, to_optuna
from study.search.study_search import StudySearch
from study.tracking.callback import MlflowTrialCallback
from study.tracking.doors import optuna_storage
from trainables.schema import record as R
from trainables.schema.spec import StudySpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from ray.tune import Tuner
    from ray.tune.schedulers import TrialScheduler

__all__ = [
    "stage_tuner",
    "stage_ledger",
    "study_searcher",
    "cell_searcher",
    "cell_scheduler",
    "search_tuner",
    "grid_tuner",
]


#: Ray's switch for its check that every result holds the experiment's metric (``tune_controller``).
_STRICT_METRICS_OFF = "TUNE_DISABLE_STRICT_METRIC_CHECKING"


def _trial_dirname(trial: Any) -> str:
    return R.trial_dir(trial.trial_id)


def stage_tuner(
    context: StudyContext,
    experiment: str,
    param_space: dict[str, Any],
    callbacks: list[Any],
    tune_config: Callable[[], dict[str, Any]] | None,
) -> Tuner:
    """One stage's Tuner, the same wiring for the search and the final stage: ``train_fn`` with the spec's resources,
    this driver's callbacks (and :class:`StopOnSignal`, and a :class:`StageLedger` for :func:`stage_ledger`) and retry
    budget, one checkpoint kept per trial (:mod:`study.runtime.checkpoint_repair` on restore), ``trial_<id>`` dirs.

    ``tune_config=None`` restores the stage's experiment (``<root>/<experiment>``); else a new one is built with
    ``tune_config()``'s ``TuneConfig`` options (the search's searcher and scheduler are built only then).
    """
    from ray import tune

    from trainables.loop import train_fn

    spec, layout = context.spec, context.layout
    # Every stage (a table's too) drains on a stop signal and says which of its trials ended.
    callbacks = [*callbacks, StageLedger(run_meter()), StopOnSignal(context.options.drain_timeout_s)]
    trainable = tune.with_resources(train_fn, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
    failure_config = tune.FailureConfig(max_failures=context.options.max_failures)
    if tune_config is None:
        accept_old_names()  # a study started before the engine moved to study/search/ names the old modules
        tuner = tune.Tuner.restore(
            f"{layout.root}/{experiment}",
            trainable,
            resume_unfinished=True,
            resume_errored=False,
            param_space=param_space,
        )
        # The restored run config is the pickle taken at the stage's start: give it this driver's callbacks (fresh
        # MLflow client, parent run reopened) and this invocation's retry budget. Ray offers no public setter; the
        # searcher and scheduler are restored as pickled (see StudySearch, PersistentASHA).
        run_config = restored_run_config(tuner)
        run_config.callbacks = [*_restore_callbacks(tuner), *callbacks]
        run_config.failure_config = failure_config
        return tuner
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            max_concurrent_trials=spec.search.max_concurrent,
            trial_dirname_creator=_trial_dirname,
            # One worker process runs trial after trial (Ray resets its session): imports, the dataset and the first
            # calls are paid once per worker, not per trial (docs/notebook/performance.md). An errored trial's actor is never
            # reused, and the NaN marker lives in the trial's storage directory (trainables.loop).
            reuse_actors=True,
            **tune_config(),
        ),
        run_config=tune.RunConfig(
            name=experiment,
            storage_path=layout.root,
            callbacks=callbacks,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            failure_config=failure_config,
            verbose=0,  # ProgressTable replaces Ray's reporter, which prints the whole spec per trial
        ),
    )


def _restore_callbacks(tuner: Tuner) -> list[Any]:
    """What a restored stage does on its first step, before any trial starts or is asked: repair the trials whose
    checkpoint Ray deleted after its last snapshot; the search's searcher adopts the final trials Ray restored that
    its own snapshot does not know, and reconciles its trials' ends with Ray's (:class:`ReconcileTrials`)."""
    searcher = restored_searcher(tuner)
    reconcile = [ReconcileTrials(searcher, restored=True)] if isinstance(searcher, CellSearch) else []
    return [CheckpointRepair(), *reconcile]


def stage_ledger(tuner: Tuner) -> StageLedger:
    """The :class:`StageLedger` :func:`stage_tuner` gave ``tuner``: after ``fit``, which of the stage's trials ended."""
    found = [c for c in restored_run_config(tuner).callbacks or [] if isinstance(c, StageLedger)]
    assert len(found) == 1, f"a stage's Tuner has one StageLedger, not {len(found)}"
    return found[0]


def study_searcher(spec: StudySpec, layout: StudyLayout, study_name: str, lag: int) -> StudySearch:
    """The searcher of one cell's Optuna study: the spec's sampler (ordered with ``lag`` when ``search.reproducible``:
    :mod:`study.search.ordered_sampler`) over the run's Optuna storage guarded through outages."""
    s = spec.search
    sampler = make_sampler(s.sampler, s.space)
    return StudySearch(
        space=to_optuna(s.space),
        metric=s.objective,
        mode=s.mode,
        sampler=OrderedSampler(sampler, lag) if s.reproducible else sampler,
        study_name=study_name,
        storage=optuna_storage(layout.optuna_url),
        max_t=spec.train.epochs,
        lag=lag if s.reproducible else None,
    )


def cell_searcher(plan: StudyPlan, layout: StudyLayout) -> CellSearch:
    """The run's searcher: one study searcher per cell (:func:`study_searcher`, the plan's lag), ``trials_per_cell``
    each, lost trials replaced when the plan says so, each cell's final seeds asked as its search ends when the plan
    says so (:attr:`~study.intake.plan.StudyPlan.final_with_search`)."""
    s = plan.base.search
    cells = [(c.label, c.fixed, study_searcher(c.spec, layout, c.study_name, plan.lag)) for c in plan.cells]
    final = plan.base.final if plan.final_with_search else None
    epochs = plan.base.train.epochs
    rungs = s.scheduler.checkpoint_epochs(epochs) - {epochs}  # where a pausing scheduler ranks (halving's rungs)
    budget = CellBudget(plan.trials_per_cell, plan.replace_lost, final, epochs, frozenset(rungs))
    return CellSearch(cells, budget, s.objective, s.mode, trials_dir=layout.tune_dir)


def cell_scheduler(plan: StudyPlan, layout: StudyLayout) -> TrialScheduler:
    """The run's Ray scheduler, its ``search.scheduler`` kind's (:func:`study.search.schedulers.build_scheduler`:
    FIFO, or rungs per cell kept in the study directory across resumes; a study is one cell)."""
    return build_scheduler(plan, layout)


def _live_view(plan: StudyPlan) -> ProgressTable | CellProgress:
    """The plan's live view: a row per cell (a table), else a row per trial with its sampled values (a study)."""
    if plan.view == VIEW_CELLS:
        return CellProgress(plan)
    s = plan.base.search
    epochs = plan.base.train.epochs
    view = ProgressTable(TrialColumns(s.objective, s.mode, s.num_trials, epochs, tuple(s.space)))
    view.rungs = s.scheduler.checkpoint_epochs(epochs) - {epochs}  # a rung's choice gets its reliability
    return view


def search_tuner(context: StudyContext, param_space: dict[str, Any], callback: MlflowTrialCallback) -> Tuner:
    """The search stage from the run's plan: :func:`cell_searcher`, :func:`cell_scheduler`, its live view."""
    plan, layout = context.plan, context.layout
    reconcile = ReconcileTrials()  # settles the lost trials when the search ends whole (study.search.cell_search)
    callbacks: list[Any] = [callback, _live_view(plan), PendingTimeout(context.options.pending_timeout_s)]
    callbacks += [] if context.resuming else [reconcile]
    if plan.final_with_search:
        # Ray requires the search metric in every result of the experiment; the final trials a table's cells start in
        # it report test metrics only (they have no validation classes). The searcher and the schedulers read the
        # metric of search trials only (a final trial belongs to no cell), so the check is Ray's alone to drop.
        os.environ[_STRICT_METRICS_OFF] = "1"

    def search_config() -> dict[str, Any]:
        searcher = reconcile.searcher = cell_searcher(plan, layout)
        return {
            "metric": plan.base.search.objective,
            "mode": plan.base.search.mode,
            "search_alg": searcher,
            "scheduler": cell_scheduler(plan, layout),
            # The searcher ends the experiment (Searcher.FINISHED) once every cell has its budget; Ray's own
            # limit leaves room for the replacements of lost trials.
            "num_samples": searcher.max_trials,
        }

    return stage_tuner(
        context, R.SEARCH_EXPERIMENT, param_space, callbacks, None if context.resuming else search_config
    )


def grid_tuner(
    context: StudyContext,
    experiment: str,
    param_space: dict[str, Any],
    callback: MlflowTrialCallback,
    shown: tuple[str, int],
) -> Tuner:
    """A stage that runs a grid of points in its experiment (the final stage's seeds, a stage's retrained
    finalists): its live view shows ``shown`` (the metric, the number of points); restored when its experiment exists
    (a driver died during it: its points are the same, the search's results are)."""
    from ray.tune import Tuner

    spec = context.spec
    metric, num_points = shown
    callbacks = [
        callback,
        ProgressTable(TrialColumns(metric, spec.search.mode, num_points, spec.train.epochs)),
        PendingTimeout(context.options.pending_timeout_s),
    ]
    restore = Tuner.can_restore(f"{context.layout.root}/{experiment}")
    return stage_tuner(context, experiment, param_space, callbacks, None if restore else dict)

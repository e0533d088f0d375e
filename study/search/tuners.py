"""The Ray Tune ``Tuner`` of each stage of a study, wired once (:func:`stage_tuner`): the search
(:func:`search_tuner`: Optuna's sampler behind :class:`~study.search.study_search.StudySearch`, ASHA or FIFO) and the final
stage (:func:`final_tuner`: a grid over the best configurations' seeds). Both restore their experiment when a driver
resumes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from study.layout import StudyLayout
from study.progress import ProgressTable
from study.runtime.compat import restored_run_config
from study.runtime.run_progress import run_meter
from study.runtime.stop_callback import StageLedger, StopOnSignal
from study.runtime.watchdog import PendingTimeout
from study.search.context import StudyContext
from study.search.old_names import accept_old_names
from study.search.ordered_sampler import OrderedSampler
from study.search.persistent_asha import PersistentASHA
from study.search.space import make_sampler, to_optuna
from study.search.study_search import StudySearch
from study.tracking.callback import MlflowTrialCallback
from study.tracking.stores import optuna_storage
from trainables.schema import record as R
from trainables.schema.metric_names import final_metric
from trainables.schema.spec import StudySpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from ray.tune import Tuner

__all__ = ["stage_tuner", "stage_ledger", "study_searcher", "search_tuner", "final_tuner"]


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
    budget, one checkpoint kept per trial, ``trial_<id>`` directories.

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
        run_config.callbacks = callbacks
        run_config.failure_config = failure_config
        return tuner
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            max_concurrent_trials=spec.search.max_concurrent,
            trial_dirname_creator=_trial_dirname,
            # One worker process runs trial after trial (Ray resets its session): imports, the dataset and the first
            # calls are paid once per worker, not per trial (docs/performance.md). An errored trial's actor is never
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


def stage_ledger(tuner: Tuner) -> StageLedger:
    """The :class:`StageLedger` :func:`stage_tuner` gave ``tuner``: after ``fit``, which of the stage's trials ended."""
    found = [c for c in restored_run_config(tuner).callbacks or [] if isinstance(c, StageLedger)]
    assert len(found) == 1, f"a stage's Tuner has one StageLedger, not {len(found)}"
    return found[0]


def study_searcher(spec: StudySpec, layout: StudyLayout, study_name: str, lag: int) -> StudySearch:
    """The searcher of one Optuna study: the spec's sampler (ordered with ``lag`` when ``search.reproducible``:
    :mod:`study.search.ordered_sampler`) over the study's Optuna storage guarded through outages. A study has one; a table
    one per cell (:mod:`study.table.run`), built here so both get the same storage and ordering."""
    s = spec.search
    sampler = make_sampler(s.sampler, s.space)
    return StudySearch(
        space=to_optuna(s.space),
        metric=s.metric,
        mode=s.mode,
        sampler=OrderedSampler(sampler, lag) if s.reproducible else sampler,
        study_name=study_name,
        storage=optuna_storage(layout.optuna_url),
        max_t=spec.train.epochs,
        lag=lag if s.reproducible else None,
    )


def search_tuner(context: StudyContext, param_space: dict[str, Any], callback: MlflowTrialCallback) -> Tuner:
    """The search stage: Optuna's sampler behind :class:`StudySearch`, ASHA or FIFO, ``search.num_trials`` trials."""
    spec, layout = context.spec, context.layout
    s = spec.search
    callbacks = [
        callback,
        ProgressTable(s.metric, s.mode, s.num_trials, spec.train.epochs, list(s.space)),
        PendingTimeout(context.options.pending_timeout_s),
    ]

    def search_config() -> dict[str, Any]:
        from ray.tune.schedulers import FIFOScheduler, TrialScheduler

        searcher = study_searcher(spec, layout, spec.name, lag=s.max_concurrent)
        scheduler: TrialScheduler = FIFOScheduler()
        if s.scheduler.type == "asha":
            scheduler = PersistentASHA(
                time_attr="training_iteration",
                max_t=spec.train.epochs,
                grace_period=min(s.scheduler.grace_period, spec.train.epochs),
                reduction_factor=s.scheduler.reduction_factor,
                state_file=layout.asha_state,
            )
        return {
            "metric": s.metric,
            "mode": s.mode,
            "search_alg": searcher,
            "scheduler": scheduler,
            "num_samples": s.num_trials,
        }

    return stage_tuner(
        context, R.SEARCH_EXPERIMENT, param_space, callbacks, None if context.resuming else search_config
    )


def final_tuner(
    context: StudyContext, param_space: dict[str, Any], callback: MlflowTrialCallback, num_points: int
) -> Tuner:
    """The final stage: a grid over ``param_space``'s final points, restored when a driver died during it (its points
    are the same: the search's results are)."""
    from ray.tune import Tuner

    spec = context.spec
    callbacks = [
        callback,
        ProgressTable(final_metric(spec.search.metric), spec.search.mode, num_points, spec.train.epochs, []),
        PendingTimeout(context.options.pending_timeout_s),
    ]
    restore = Tuner.can_restore(context.layout.final_dir)
    return stage_tuner(context, R.FINAL_EXPERIMENT, param_space, callbacks, None if restore else dict)

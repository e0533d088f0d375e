"""Private Ray Tune, Optuna and Python internals the study relies on, in one place, each with a test.

Neither library offers a public way to do these (give a restored Tuner this driver's callbacks, and reach its searcher; map Ray trials to
Optuna trials inside ``OptunaSearch``; write a trial's system attribute or state through the study's storage;
read ASHA's per-trial brackets; give a trial one more retry; point a restored trial at another checkpoint; reach a trial's actor to end it at once; keep Tune from waiting for a trial no searcher will give; look at a trial's failure before Tune acts on it, and have its snapshot record it; guard the private storage calls Optuna's cache makes; show a sampler another list of trials; run the first step of interpreter shutdown before a fast ``os._exit``). An upgrade that renames one fails ``tests/study/runtime/test_compat.py`` — one fast test
per attribute — instead of a study in the middle of a resume. The pins in ``pyproject.toml`` (``ray[tune]``
2.50–2.60, ``optuna`` 4 and 5) are the versions these were checked against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import optuna
    from ray.tune import RunConfig, Tuner
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

__all__ = [
    "finish_threads",
    "restored_run_config",
    "restored_searcher",
    "optuna_trials_of",
    "completed_trials_of",
    "optuna_study_of",
    "study_storage",
    "storage_trial_id",
    "asha_trial_info",
    "spare_failure",
    "trial_failures",
    "tune_asks_without_waiting_while",
    "tune_interrupted",
    "asha_admit",
    "asha_rungs",
    "study_trials",
    "study_with_trials",
    "RDB_PRIVATE_CALLS",
    "concurrency_limiter",
    "release_concurrency",
    "hold_concurrency",
    "keep_paused_on_add",
    "trial_checkpoint_result",
    "set_trial_checkpoint",
    "trial_actor",
    "before_trial_failure",
    "snapshot_failed_trials",
]

#: Private ``RDBStorage`` methods Optuna's ``_CachedStorage`` calls besides the public ``BaseStorage`` API: the
#: outage guard (:class:`study.tracking.guarded.GuardedRDBStorage`) must wrap them too, or a database restart
#: would end a study at one of them.
RDB_PRIVATE_CALLS = (
    "_create_new_trial",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
    "_get_trials",
    "_set_trial_param",
)


def finish_threads() -> None:
    """What ``Py_Finalize`` does first: run ``threading``'s exit hooks (``concurrent.futures`` tells its idle pool
    workers to stop there), then join every non-daemon thread. Joining the threads without the hooks would wait
    forever on an executor's idle workers, and Python offers no public call for the two together."""
    import threading

    threading._shutdown()  # type: ignore[attr-defined]


def restored_run_config(tuner: Tuner) -> RunConfig:
    """The run config a ``Tuner.restore`` unpickled (mutable: callbacks, failure config)."""
    assert tuner._local_tuner is not None, "a Tuner connected to a remote driver (Ray Client) is not supported"
    return tuner._local_tuner._run_config


def restored_searcher(tuner: Tuner) -> Any:
    """The searcher a ``Tuner.restore`` unpickled (``TuneConfig.search_alg``): the object whose state Ray restores from
    the experiment's snapshot when ``fit`` starts; ``None`` for a stage without one."""
    assert tuner._local_tuner is not None, "a Tuner connected to a remote driver (Ray Client) is not supported"
    return tuner._local_tuner._tune_config.search_alg


def optuna_trials_of(searcher: OptunaSearch) -> dict[str, optuna.trial.Trial]:
    """``OptunaSearch``'s map from Ray trial id to the Optuna trial it asked for."""
    return searcher._ot_trials


def completed_trials_of(searcher: OptunaSearch) -> set[str]:
    """The Ray trial ids ``OptunaSearch`` has already told Optuna about."""
    return searcher._completed_trials


def optuna_study_of(searcher: OptunaSearch) -> optuna.Study:
    study = searcher._ot_study
    assert study is not None, "OptunaSearch has no study before its search space is set"
    return study


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage behind a study (to set a system attribute or a state by storage trial id)."""
    return study._storage


def storage_trial_id(trial: Any) -> int:
    """The storage id of an ``optuna.trial.Trial`` or ``FrozenTrial`` (not its ``number``)."""
    return trial._trial_id


def asha_trial_info(scheduler: ASHAScheduler) -> dict[str, Any]:
    """ASHA's map from Ray trial id to the bracket the trial is in."""
    return scheduler._trial_info


def asha_admit(scheduler: ASHAScheduler, trial_id: str) -> None:
    """Enter a trial in a one-bracket ASHA's bracket, as its ``on_trial_add`` would (a restored study's live trial)."""
    scheduler._trial_info[trial_id] = scheduler._brackets[0]


def asha_rungs(scheduler: ASHAScheduler) -> dict[float, dict[str, float]]:
    """The rungs of a one-bracket ASHA, the live dicts: milestone → {Ray trial id: the value recorded there, times
    the mode's sign (larger is better)}."""
    return {milestone: recorded for milestone, recorded in scheduler._brackets[0]._rungs}


def trial_failures(trial: Any) -> int:
    """How often a Ray Tune ``Trial`` has failed so far (what ``Trial.should_recover`` compares with its
    ``max_failures``)."""
    return int(trial.run_metadata.num_failures)


def spare_failure(trial: Any, delta: int) -> bool:
    """Give a Ray Tune ``Trial`` ``delta`` more retries from its checkpoint (its own ``max_failures``, set from
    ``FailureConfig`` when it was created and kept in the experiment state); ``False``, and nothing changed, when it
    retries without limit (-1)."""
    if trial.max_failures < 0:
        return False
    trial.max_failures += delta
    return True


def tune_asks_without_waiting_while(condition: Callable[[], bool]) -> None:
    """While ``condition()`` holds, Ray Tune's controller asks its searcher for a next trial without waiting for one.

    With no trial running, pending or paused, ``TuneController._update_trial_queue(blocking=True)`` calls the
    searcher once a second until it gives a trial, for up to 600 s (a timeout Ray 2.60 does not expose), and Tune
    looks at its interrupt only after that. A study's searcher gives none once a stop signal has come
    (:mod:`study.runtime.stopping`), so a stop between two trials, or after the last running trial failed, would hold
    the driver ten minutes instead of ending ``fit``. Installed once per process; the condition of the first call
    stays."""
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController._update_trial_queue
    if getattr(original, "_asks_without_waiting", False):
        return

    def update_trial_queue(self: TuneController, blocking: bool = False, timeout: int = 600) -> bool:
        return original(self, blocking=blocking and not condition(), timeout=timeout)

    update_trial_queue._asks_without_waiting = True  # type: ignore[attr-defined]
    TuneController._update_trial_queue = update_trial_queue  # type: ignore[method-assign]


def tune_interrupted(handler: Any) -> bool:
    """Whether Ray Tune's signal handler ``handler`` (``signal_interrupt_tune_run``, which
    ``ray.tune.tune._setup_signal_catching`` installs for ``SIGUSR1`` as ``fit`` starts) has already fired: the
    ``experiment_interrupted_event`` it closes over is set."""
    code, closure = getattr(handler, "__code__", None), getattr(handler, "__closure__", None)
    if code is None or closure is None:
        return False
    event = dict(zip(code.co_freevars, closure)).get("experiment_interrupted_event")
    return event is not None and event.cell_contents.is_set()


def study_trials(study: optuna.Study, deepcopy: bool, use_cache: bool) -> list[optuna.trial.FrozenTrial]:
    """Every trial of ``study`` through ``Study._get_trials``, the one method samplers (and ``get_trials``, ``trials``)
    read the history with; ``use_cache`` as Optuna's samplers pass it (one storage read per ``ask``)."""
    return study._get_trials(deepcopy=deepcopy, states=None, use_cache=use_cache)


def study_with_trials(study: optuna.Study, get_trials: Callable[..., list[optuna.trial.FrozenTrial]]) -> optuna.Study:
    """A shallow copy of ``study`` (same storage, sampler, directions) whose ``_get_trials`` is ``get_trials``: what
    a sampler given it sees as the study's history (:mod:`study.search.ordered_sampler`)."""
    import copy

    view = copy.copy(study)
    view._get_trials = get_trials  # type: ignore[method-assign]
    return view


def concurrency_limiter(tune_controller: Any) -> Any | None:
    """The experiment's ``ConcurrencyLimiter`` (``TuneConfig(max_concurrent_trials=…)`` wraps the searcher in one),
    when it limits; else ``None``. It counts a trial as live from its suggestion to its end, PAUSED included: a
    synchronous scheduler (:mod:`study.search.halving`) takes a trial waiting at a barrier out of that count."""
    from ray.tune.search import ConcurrencyLimiter

    limiter = getattr(getattr(tune_controller, "search_alg", None), "searcher", None)
    return limiter if isinstance(limiter, ConcurrencyLimiter) and limiter._limit_concurrency else None


def release_concurrency(limiter: Any, trial_id: str) -> None:
    """The limiter stops counting ``trial_id`` as live (a trial paused at a barrier frees its slot)."""
    if trial_id in limiter.live_trials:
        limiter.live_trials.discard(trial_id)
        limiter.num_unfinished_live_trials -= 1


def hold_concurrency(limiter: Any, trial_id: str) -> None:
    """The limiter counts ``trial_id`` as live again: before it resumes, and before it is stopped (the limiter hands
    ``on_trial_complete`` to the searcher only for a trial it counts, so Optuna hears of the end)."""
    if trial_id not in limiter.live_trials:
        limiter.live_trials.add(trial_id)
        limiter.num_unfinished_live_trials += 1


def keep_paused_on_add(trial: Any) -> None:
    """Called from a scheduler's ``on_trial_add``: the restored trial stays PAUSED instead of PENDING. Ray's restore
    sets every unfinished trial PENDING, then ``TuneController.add_trial`` calls ``on_trial_add`` before it files the
    trial under its status; a PAUSED trial is started only when ``choose_trial_to_run`` returns it."""
    from ray.tune.experiment import Trial

    trial.set_status(Trial.PAUSED)


def trial_actor(trial: Any) -> Any | None:
    """The Ray actor a Ray Tune ``Trial`` runs in (``None``: not started, or already stopped by Tune)."""
    return trial.temporary_state.ray_actor


def trial_checkpoint_result(trial: Any) -> Any | None:
    """The checkpoint a Ray Tune ``Trial`` resumes from, as Ray's ``_TrainingResult`` (``.checkpoint``, ``.metrics``:
    the result it came with), or ``None``."""
    manager = trial.run_metadata.checkpoint_manager
    return None if manager is None else manager.latest_checkpoint_result


def set_trial_checkpoint(trial: Any, checkpoint: Any | None, metrics: dict[str, Any], index: int = -1) -> None:
    """Make ``checkpoint`` (a ``ray.tune.Checkpoint`` in folder ``checkpoint_<index>``; ``None``: none, the trial
    trains from its first epoch) the one a restored ``Trial`` resumes from; ``metrics`` is the result it came with
    (Ray counts ``training_iteration`` on from it). The trial's next checkpoint folder is then ``index + 1`` at least:
    Ray numbers them by the last one's index in the trial's storage context, and a snapshot saved before that
    checkpoint was written would have the trial write its next one into the folder it resumes from, then delete that
    folder as the older checkpoint when it registered it. Ray keeps a trial's checkpoints in its run metadata and its
    storage context in its state, each cached as JSON for the next snapshot."""
    from ray.train._internal.checkpoint_manager import _TrainingResult

    manager = trial.run_metadata.checkpoint_manager
    result = None if checkpoint is None else _TrainingResult(checkpoint=checkpoint, metrics=metrics)
    manager._latest_checkpoint_result = result
    manager._checkpoint_results = [] if result is None else [result]
    trial.storage.current_checkpoint_index = max(trial.storage.current_checkpoint_index, index)
    trial.run_metadata.invalidate_cache()
    trial.invalidate_json_state()


#: What :func:`before_trial_failure` calls (the latest one given).
_failure_hook: list[Callable[[], None]] = []


def snapshot_failed_trials() -> None:
    """Every trial failure reaches Ray Tune's next experiment snapshot: the failed trial's new state (ERROR, or
    PENDING for a retry) replaces the one the snapshot held.

    Ray refreshes a trial's entry in the snapshot (``TuneController._mark_trial_to_checkpoint``) where it stops the
    trial's live actor; a trial whose actor had died (its node lost, the worker killed) was told to the searcher as
    failed (Optuna FAIL, a table's replacement) yet stayed RUNNING in every later snapshot, so ``--resume`` ran it again
    from its checkpoint and it finished as well (measured: a table's private Ray killed mid-search). ``TuneController._process_trial_failure`` (every
    trial failure goes through it) is wrapped once per process; :func:`before_trial_failure` adds to the same wrapper."""
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController._process_trial_failure
    if getattr(original, "_study_hook", False):
        return

    def process_trial_failure(self: TuneController, trial: Any, exception: Any) -> None:
        for call in list(_failure_hook):
            call()
        original(self, trial, exception)
        self._mark_trial_to_checkpoint(trial)

    process_trial_failure._study_hook = True  # type: ignore[attr-defined]
    TuneController._process_trial_failure = process_trial_failure  # type: ignore[method-assign]


def before_trial_failure(hook: Callable[[], None] | None) -> None:
    """Ray Tune's controller calls ``hook()`` as a trial fails, before it acts on the failure: before it decides
    between a retry from the checkpoint and an error, which it tells the scheduler, the searcher (Optuna: FAIL, and a
    table's cell asks a replacement) and the callbacks (MLflow: FAILED). ``None`` removes the hook; a later call
    replaces it. Installs :func:`snapshot_failed_trials`'s wrapper."""
    _failure_hook[:] = [] if hook is None else [hook]
    snapshot_failed_trials()

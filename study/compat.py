"""Private Ray Tune and Optuna internals the study relies on, in one place, each with a test.

Neither library offers a public way to do these (give a restored Tuner this driver's callbacks; map Ray trials to
Optuna trials inside ``OptunaSearch``; write a trial's system attribute or state through the study's storage;
read ASHA's per-trial brackets; show a sampler another list of trials; ask a cluster's GCS whether this driver's token is accepted before ``ray.init``). An upgrade that renames one fails ``tests/study/test_compat.py`` — one fast test
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
    "restored_run_config",
    "optuna_trials_of",
    "completed_trials_of",
    "optuna_study_of",
    "study_storage",
    "storage_trial_id",
    "asha_trial_info",
    "gcs_client",
    "study_trials",
    "study_with_trials",
]


def restored_run_config(tuner: Tuner) -> RunConfig:
    """The run config a ``Tuner.restore`` unpickled (mutable: callbacks, failure config)."""
    assert tuner._local_tuner is not None, "a Tuner connected to a remote driver (Ray Client) is not supported"
    return tuner._local_tuner._run_config


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


def gcs_client(address: str) -> Any:
    """A client of the GCS at ``host:port``; building it authenticates with this process's ``RAY_AUTH_*``
    environment and raises ``ray.exceptions.AuthenticationError`` when the cluster refuses the token."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def study_trials(study: optuna.Study, deepcopy: bool, use_cache: bool) -> list[optuna.trial.FrozenTrial]:
    """Every trial of ``study`` through ``Study._get_trials``, the one method samplers (and ``get_trials``, ``trials``)
    read the history with; ``use_cache`` as Optuna's samplers pass it (one storage read per ``ask``)."""
    return study._get_trials(deepcopy=deepcopy, states=None, use_cache=use_cache)


def study_with_trials(study: optuna.Study, get_trials: Callable[..., list[optuna.trial.FrozenTrial]]) -> optuna.Study:
    """A shallow copy of ``study`` (same storage, sampler, directions) whose ``_get_trials`` is ``get_trials``: what
    a sampler given it sees as the study's history (:mod:`study.ordered_search`)."""
    import copy

    view = copy.copy(study)
    view._get_trials = get_trials  # type: ignore[method-assign]
    return view

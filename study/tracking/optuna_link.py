"""The links between the two stores: which Optuna trial a Ray trial's MLflow run is, and the order Optuna asked the
search trials in. Both read and write Optuna through :func:`study.tracking.doors.optuna_storage` (guarded, pre-pinged),
so a database restart when a trial starts or between the stages is ridden out like any other call."""

from __future__ import annotations

from typing import Any

from study.runtime.compat import storage_trial_id
from study.tracking.doors import load_optuna_study, optuna_storage, optuna_study_names
from trainables.schema.record import OPTUNA_MLFLOW_RUN_ID, OPTUNA_RAY_TRIAL_ID, OPTUNA_TRIAL_NUMBER

__all__ = ["OptunaRunLink", "trial_numbers"]


class OptunaRunLink:
    """Writes the MLflow run id of a search trial's child run into its Optuna trial's user attributes, found by the
    Ray trial id :class:`study.search.study_search.StudySearch` wrote there. Called by the MLflow callback once the run exists
    (the trial is running, so Optuna still accepts the attribute); picklable, as Ray pickles the callbacks with its
    experiment."""

    def __init__(self, optuna_url: str, study_name: str) -> None:
        self.optuna_url = optuna_url
        self.study_name = study_name
        self._storage: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_storage": None}

    def __call__(self, ray_trial_id: str, run_id: str) -> dict[str, str]:
        """Links the run; returns the tags the run gets: its Optuna trial number (:data:`OPTUNA_TRIAL_NUMBER`)."""
        import optuna

        if self._storage is None:
            self._storage = optuna_storage(self.optuna_url)
        for name in optuna_study_names(self._storage, self.study_name):
            study_id = self._storage.get_study_id_from_name(name)
            running = self._storage.get_all_trials(study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            for trial in running:
                if trial.user_attrs.get(OPTUNA_RAY_TRIAL_ID) == ray_trial_id:
                    self._storage.set_trial_user_attr(storage_trial_id(trial), OPTUNA_MLFLOW_RUN_ID, run_id)
                    return {OPTUNA_TRIAL_NUMBER: str(trial.number)}
        return {}


def trial_numbers(optuna_url: str, study_name: str) -> dict[str, int]:
    """Ray trial id → Optuna trial number of every search trial that carries its Ray trial id (the order trials
    were asked in: the best rule's tie-break, :func:`study.final.stage.creation_order`). A table's cells are Optuna
    studies of their own (``<name>.<arm>.<cell>``): their trials are read too, numbered within their cell, which is
    where the rule compares them."""
    storage = optuna_storage(optuna_url)
    try:
        return {
            t.user_attrs[OPTUNA_RAY_TRIAL_ID]: t.number
            for name in optuna_study_names(storage, study_name)
            for t in load_optuna_study(name, storage).get_trials(deepcopy=False)
            if OPTUNA_RAY_TRIAL_ID in t.user_attrs
        }
    finally:
        storage.remove_session()

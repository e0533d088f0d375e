"""What a search trial leaves on its Optuna trial as it ends, and what a restored trial last reported: the Optuna side of
:class:`~study.search.cell_search.CellSearch`, in functions of their own (the dispatcher is pickled by Ray; these hold
no state).

- :func:`record_trial_attrs`: the trial's cost and what its cell's selection reliability reads, as user attributes
  of its Optuna trial, before it is told: ``--status`` and the report read them per cell from Optuna, without reading
  every MLflow run;
- :func:`decoded_selection`: the kept per-class records (JSON text in a Ray result) as attribute values;
- :func:`restored_last_result`: a trial Ray restored as finished without its last result.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from study.runtime.compat import completed_trials_of, optuna_study_of, optuna_trials_of, storage_trial_id, study_storage
from trainables.schema import record as R
from trainables.schema.metric_names import COST_METRICS, EPOCH

if TYPE_CHECKING:
    from study.search.study_search import StudySearch

__all__ = ["record_trial_attrs", "decoded_selection", "restored_last_result"]


def record_trial_attrs(searcher: StudySearch, trial_id: str, result: dict | None) -> None:
    """The trial's cost (:data:`~trainables.schema.metric_names.COST_METRICS`, from its last result) and what its
    cell's selection reliability reads (:func:`decoded_selection`) as user attributes of its Optuna trial, before it
    is told (a finished trial takes none)."""
    from optuna.exceptions import UpdateFinishedTrialError

    trial = optuna_trials_of(searcher).get(trial_id)
    if trial is None or trial_id in completed_trials_of(searcher):
        return
    try:
        for name in COST_METRICS:
            if isinstance(value := (result or {}).get(name), (int, float)):
                trial.set_user_attr(name, float(value))
        for name in (R.VAL_PER_CLASS, R.OPTUNA_LAST_TWO, R.OPTUNA_RUNG_RECORDS):
            if isinstance(value := (result or {}).get(name), (dict, list)):
                trial.set_user_attr(name, value)
    except UpdateFinishedTrialError:
        return  # told before a driver restart (the snapshot held it RUNNING): it has its costs already


def decoded_selection(kept: dict[str, Any]) -> dict[str, Any]:
    """A trial's kept selection values (its per-class record and its rungs' records, JSON text as Ray's results carry
    them) as its Optuna trial's user attributes (JSON values)."""
    if isinstance(record := kept.get(R.VAL_PER_CLASS), str):
        kept[R.VAL_PER_CLASS] = json.loads(record)
    if isinstance(rungs := kept.get(R.OPTUNA_RUNG_RECORDS), dict):
        kept[R.OPTUNA_RUNG_RECORDS] = {epoch: json.loads(r) for epoch, r in rungs.items()}
    return kept


def restored_last_result(
    searcher: StudySearch, trial_id: str, metric: str, ray_last: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What a trial that Ray restored as finished last reported: Ray's restored last result when it holds ``metric``
    (it may not: seen empty after a warm head died mid-study, and the trial was then told PRUNED), else the last epoch
    Optuna recorded for it (its storage is written at each epoch, before any snapshot)."""
    if ray_last and metric in ray_last:
        return ray_last
    trial = optuna_trials_of(searcher).get(trial_id)
    storage = study_storage(optuna_study_of(searcher))
    steps = {} if trial is None else storage.get_trial(storage_trial_id(trial)).intermediate_values
    if not steps:
        return ray_last
    epoch = max(steps)
    return {**(ray_last or {}), metric: steps[epoch], EPOCH: epoch, "training_iteration": epoch}

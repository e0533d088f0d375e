"""Optuna's user attributes of a search trial, and the parent run's selection and verdict names (re-exported by
:mod:`trainables.schema.record`)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "OPTUNA_RAY_TRIAL_ID",
    "OPTUNA_MLFLOW_RUN_ID",
    "OPTUNA_TRIAL_NUMBER",
    "OPTUNA_FAILURE",
    "VAL_PER_CLASS",
    "OPTUNA_LAST_TWO",
    "OPTUNA_RUNG_RECORDS",
    "selection_metric",
    "SELECTION_PREFIX",
    "SELECTION_LINE",
    "VERDICT_PREFIX",
    "verdict_tag",
    "verdict_metric",
    "is_verdict_tag",
    "FAILURE_NONFINITE",
]

# ---------------------------------------------------------------------------------------------------- Optuna

#: User attributes of each Optuna trial of the search (optuna-dashboard shows them): its Ray trial id (the MLflow child
#: run's ``trial_id`` tag) and the MLflow run id of that child run.
OPTUNA_RAY_TRIAL_ID: Final = "ray_trial_id"
OPTUNA_MLFLOW_RUN_ID: Final = "mlflow_run_id"
#: Tag of a search trial's MLflow run: its Optuna trial number (the order trials were asked in; Ray's ids are random).
OPTUNA_TRIAL_NUMBER: Final = "optuna_trial_number"
#: User attribute of a table's FAIL Optuna trial that counts as evaluated (study/search/cell_search.py), and its value: the
#: trial's loss was not finite (its configuration failed). A FAIL trial without it was lost and replaced.
OPTUNA_FAILURE: Final = "failure"
FAILURE_NONFINITE: Final = "nonfinite"
#: A search trial's result key and Optuna user attribute: its search metric per validation class of each fold, at each
#: epoch in Ray's results (``result.json``), at its last epoch on its Optuna trial (trainables.loop.run.TrialRun
#: .class_record; study.final.reliability bootstraps the classes). Not a metric: MLflow logs numbers only.
VAL_PER_CLASS: Final = "val_per_class"
#: User attribute of a search trial's Optuna trial: its search metric at its last two reported epochs (the cell's rank
#: stability, study.final.reliability).
OPTUNA_LAST_TWO: Final = "val_last_two"
#: User attribute of a search trial's Optuna trial: its :data:`VAL_PER_CLASS` record at each rung epoch it reported
#: (``{"2": {...}}``; halving's rungs), so a cell whose choice the rungs made has a P(best) among the candidates of
#: its last rung with two or more (study.final.reliability).
OPTUNA_RUNG_RECORDS: Final = "val_per_class_at_rungs"


#: The prefix of :func:`selection_metric`'s names.
SELECTION_PREFIX: Final = "selection/"


def selection_metric(cell: str, what: str) -> str:
    """A metric of the run's parent MLflow run saying how reliable cell ``cell``'s choice is (study.final.reliability):
    ``what`` is ``p_best``, ``chance`` (1/n), ``candidates``, ``tie_set`` or ``stability``; e.g.
    ``selection/ms.p0.2/p_best``."""
    return f"{SELECTION_PREFIX}{cell}/{what}"


#: The last part of the parent run's tag that holds a cell's selection line (``selection/<cell>/line``).
SELECTION_LINE: Final = "line"


#: The prefix of a table's verdicts on its parent run (dashboards.compare.verdicts).
VERDICT_PREFIX: Final = "verdict/"


def verdict_tag(comparison: str) -> str:
    """The parent run's tag holding comparison ``comparison``'s verdict line (an arm against the reference on one
    cell, e.g. ``verdict/bspml.per_class_p0.2``)."""
    return f"{VERDICT_PREFIX}{comparison}"


def verdict_metric(comparison: str, what: str) -> str:
    """A metric of the parent run: comparison ``comparison``'s ``what`` (``sign`` +1 better, −1 worse, 0 neither;
    ``delta``, ``low``, ``high``, ``holm_low``, ``holm_high``, ``p_holm``, ``mde``, ``poi``, ``poi_low``,
    ``poi_high``), e.g. ``verdict/bspml.per_class_p0.2/delta``."""
    return f"{VERDICT_PREFIX}{comparison}/{what}"


def is_verdict_tag(key: str) -> bool:
    """Whether a parent run's tag is a verdict line (:func:`verdict_tag`)."""
    return key.startswith(VERDICT_PREFIX) and "/" not in key.removeprefix(VERDICT_PREFIX)

"""The MLflow runs' names, tags and params: run roles, the tags of trial runs, the parent run's tags and params, and
the names runs are given (re-exported by :mod:`trainables.schema.record`)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ROLE_TAG",
    "ROLE_STUDY",
    "ROLE_TRIAL",
    "PARENT_TAG",
    "EXPERIMENT_KIND_TAG",
    "EXPERIMENT_KIND",
    "TRIAL_ID",
    "STUDY",
    "FAMILY",
    "DATASET",
    "NOISE_KIND",
    "NOISE_RATIO",
    "SUBSET",
    "SEED",
    "STAGE",
    "STAGE_SEARCH",
    "STAGE_FINAL",
    "STAGE_RACE",
    "STAGE_DONE",
    "VALIDATION",
    "VAL_LABELS",
    "SELECTION",
    "SELECTION_VALIDATION",
    "SELECTION_TEST",
    "GROUP",
    "SOURCE_TRIAL",
    "STOPPED_EARLY",
    "EPOCHS_DONE",
    "FAILURE_REASON",
    "ARTIFACT_ERROR",
    "STUDY_DIR",
    "REFERENCE",
    "REPLICATES",
    "FINAL_PLANNED",
    "RACE_PLANNED",
    "race_run_name",
    "BEST_TRIAL_ID",
    "RUN_TAGS",
    "TRIAL_TAGS",
    "PARENT_TAGS",
    "SELECTION_TAGS",
    "PARAM_SEARCH_METRIC",
    "PARAM_SELECT_MEAN_LAST",
    "PARAM_SEARCH_MODE",
    "PARAM_SEARCH_NUM_TRIALS",
    "PARAM_SEARCH_SPACE",
    "PARAM_VALIDATION_KIND",
    "PARAM_SEARCH_REPLICATES",
    "RUN_NAME_SEP",
    "GROUP_ALL",
    "NOTE_TAG",
    "search_run_name",
    "final_run_name",
    "trial_dir",
    "best_metric",
    "ENV_PREFIX",
    "ENV_TAGS",
    "RAY_EXPERIMENT",
    "sqlite_uri",
]

# ---------------------------------------------------------------------------------------------------- run roles

#: The tag that tells a study's parent run from its trial runs, and its two values.
ROLE_TAG: Final = "dmlstudy.role"
ROLE_STUDY: Final = "study"
ROLE_TRIAL: Final = "trial"
#: MLflow's own nesting tag: a child run names its parent's run id here.
PARENT_TAG: Final = "mlflow.parentRunId"
#: The experiment tag MLflow's UI reads to choose its view, and the value of its "Model training" view.
EXPERIMENT_KIND_TAG: Final = "mlflow.experimentKind"
EXPERIMENT_KIND: Final = "custom_model_development"

# ---------------------------------------------------------------------------------------------------- trial tags

#: Ray's trial id; ``source_trial`` and ``best_trial_id`` refer to runs by it (the run's name is readable:
#: :func:`search_run_name`, :func:`final_run_name`).
TRIAL_ID: Final = "trial_id"
STUDY: Final = "study"
FAMILY: Final = "family"
DATASET: Final = "dataset"
NOISE_KIND: Final = "noise_kind"
#: The injected noise ratio as text (``0.0`` for ``kind: none``).
NOISE_RATIO: Final = "noise_ratio"
SUBSET: Final = "subset"
SEED: Final = "seed"
#: The protocol stage: a trial run's is search or final; the parent run's moves search → final → done.
STAGE: Final = "stage"
STAGE_SEARCH: Final = "search"
STAGE_FINAL: Final = "final"
#: The finalist race (``final.race``): each cell's top search trials retrained on more seeds, on validation
#: only, before the final stage retrains the one with the best mean.
STAGE_RACE: Final = "race"
STAGE_DONE: Final = "done"
#: ``validation.kind`` of the run (``none`` on final runs, which train on every training class).
VALIDATION: Final = "validation"
VAL_LABELS: Final = "val_labels"
#: Where the hyperparameters were selected: on validation classes, or (``validation.kind: none``) on the test classes.
SELECTION: Final = "selection"
SELECTION_VALIDATION: Final = "validation"
SELECTION_TEST: Final = "test"
#: Final runs only: their ``final.group_by`` group label, and the ``trial_id`` of the search run they retrain.
GROUP: Final = "group"
SOURCE_TRIAL: Final = "source_trial"
#: Set when a trial run ends.
STOPPED_EARLY: Final = "stopped_early"
EPOCHS_DONE: Final = "epochs_done"
FAILURE_REASON: Final = "failure_reason"
ARTIFACT_ERROR: Final = "artifact_error"
#: The Ray experiment a trial run is a trial of (:data:`SEARCH_EXPERIMENT` or :data:`FINAL_EXPERIMENT`): a table's
#: final runs are the search's when its cells start them as their search ends; a resumed driver reconciles each
#: experiment's runs with its own trials. Runs from before the tag are their stage's experiment's.
RAY_EXPERIMENT: Final = "ray_experiment"

#: The final stage's group when ``final.group_by`` is empty (the study's one group; the ``GROUP`` tag of its runs).
GROUP_ALL: Final = "all"

#: Tags every child run carries; dashboards group by them.
RUN_TAGS: Final = (TRIAL_ID, FAMILY, DATASET, NOISE_RATIO)
#: Tags ``study.search.driver.describe_trial`` gives a trial run (``GROUP``/``SOURCE_TRIAL`` on final runs only).
TRIAL_TAGS: Final = (
    STUDY,
    FAMILY,
    DATASET,
    NOISE_KIND,
    NOISE_RATIO,
    SUBSET,
    SEED,
    STAGE,
    VALIDATION,
    VAL_LABELS,
    SELECTION,
)
#: Tags of the selection protocol the dashboards read per trial run (empty strings when absent).
SELECTION_TAGS: Final = (STAGE, VALIDATION, SELECTION, GROUP, SOURCE_TRIAL)

# ---------------------------------------------------------------------------------------------------- parent run

#: The study directory (``storage/<name>/``, which holds :data:`SPEC_FILE`).
STUDY_DIR: Final = "study_dir"
#: Number of final runs planned, set when the final stage starts.
FINAL_PLANNED: Final = "final_planned"
#: Number of race runs planned, set when the race starts (``final.race``).
RACE_PLANNED: Final = "race_planned"
#: The search's best trial (:func:`study.final.best.pick_best` over every finished search trial), set when the study ends.
BEST_TRIAL_ID: Final = "best_trial_id"
#: A table's reference family (``reference:`` of a table spec, docs/notebook/tables.md): the dashboards compare with it.
REFERENCE: Final = "reference"
#: A table's ``search.replicates`` when above 1 (a study's is its parent's :data:`PARAM_SEARCH_REPLICATES` param): the
#: dashboards then show replicate 0's final runs, told apart by their group (:func:`replicate_of`).
REPLICATES: Final = "replicates"
#: Tags of the parent run (with :data:`FAMILY`, :data:`DATASET`, :data:`SELECTION`, :data:`VALIDATION`,
#: :data:`VAL_LABELS`, :data:`STAGE`).
PARENT_TAGS: Final = (STUDY_DIR, FINAL_PLANNED, RACE_PLANNED, BEST_TRIAL_ID, REFERENCE, REPLICATES)

#: MLflow's run description (markdown in its UI): the parent's lists its child runs by name, each a link to the run.
NOTE_TAG: Final = "mlflow.note.content"

#: Params of the parent run (the spec flattened with dots) that readers use.
PARAM_SEARCH_METRIC: Final = "search.metric"
#: ``search.select_on: {mean_last: k}``, flattened on the parent run (absent under ``last``).
PARAM_SELECT_MEAN_LAST: Final = "search.select_on.mean_last"
PARAM_SEARCH_MODE: Final = "search.mode"
PARAM_SEARCH_NUM_TRIALS: Final = "search.num_trials"
#: Prefix of the flattened search space (``search.space.<name>.type``, ``.log``, ...).
PARAM_SEARCH_SPACE: Final = "search.space."
PARAM_VALIDATION_KIND: Final = "validation.kind"
PARAM_SEARCH_REPLICATES: Final = "search.replicates"


#: Prefix of the parent run's tags that record what decides the study's numerics (``study/search/environment.py``):
#: library versions, CPU model and instruction sets torch dispatches to, GPUs, threads, deterministic settings.
ENV_PREFIX: Final = "env."
ENV_TAGS: Final = tuple(
    ENV_PREFIX + name
    for name in (
        "python",
        "torch",
        "numpy",
        "faiss",
        "faiss_simd",
        "pytorch_metric_learning",
        "optuna",
        "ray",
        "mlflow",
        "platform",
        "cpu_model",
        "cpu_count",
        "cpu_flags",
        "torch_cpu_capability",
        "torch_blas",
        "torch_threads",
        "deterministic_algorithms",
        "cudnn_deterministic",
        "cudnn_benchmark",
        "gpu",
        "cuda",
    )
)


def best_metric(metric: str) -> str:
    """The parent run's metric holding the search's best value of ``metric``."""
    return f"best_{metric}"


# ---------------------------------------------------------------------------------------------------- run names
# A run's name (what MLflow's UI lists) is made here only; the tracker gives each trial run one when it creates it. Ray's
# trial ids are random and say nothing; these say which cell, which trial of its search or which final seed a run is, and
# a resumed run keeps its own (the Optuna number and the final seed survive a resume). Readers find runs by their tags.

#: What joins the parts of a run's name (``ms.p0.2 · trial 7``): a middle dot, which no cell label or study name holds.
RUN_NAME_SEP: Final = " · "


def search_run_name(number: int | str, cell: str | None = None) -> str:
    """A search trial's run: ``trial 7`` (``number``: its Optuna trial number, numbered within its cell), prefixed with
    its ``cell`` when the run has several (``ms.p0.2 · trial 7``, ``bspml.p0.2.r1 · trial 7``)."""
    return RUN_NAME_SEP.join([*([cell] if cell else []), f"trial {number}"])


def final_run_name(seed: int, group: str | None = None) -> str:
    """A final-stage run: ``final · seed 3``, prefixed with its group when the stage has several
    (``ms.p0.2 · final · seed 3``, ``family=ms · final · seed 3``)."""
    return RUN_NAME_SEP.join([*([group] if group else []), "final", f"seed {seed}"])


def race_run_name(number: int | str, seed: int, group: str | None = None) -> str:
    """A race run: ``race · trial 7 · seed 1`` (``number``: the Optuna number of the search trial it retrains), prefixed
    with its group when the race has several (``ms.p0.2 · race · trial 7 · seed 1``)."""
    return RUN_NAME_SEP.join([*([group] if group else []), "race", f"trial {number}", f"seed {seed}"])


def trial_dir(trial_id: str) -> str:
    """A Ray trial's folder inside its stage's experiment (:data:`SEARCH_EXPERIMENT`, :data:`FINAL_EXPERIMENT`)."""
    return f"trial_{trial_id}"


def sqlite_uri(path: object) -> str:
    """The SQLAlchemy URL of a sqlite file (``path`` absolute, or relative to the current directory)."""
    return f"sqlite:///{path}"

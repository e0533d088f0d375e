"""The MLflow record of a study, defined once: run tags and their values, the parent run's params the dashboards
read, artifact file names and their columns, and the suffixes of the final stage's summary values.

The tracker (``study/tracking/callback.py``, ``study/search/driver.py``, ``study/final/stage.py``) writes the record and
``study/status.py`` and the dashboards read it; both sides name every tag, value and file through this module, so a
rename is one edit and a typo is an ``AttributeError`` rather than a silently empty column. Metric names are in
:mod:`trainables.schema.metric_names`.

Layout of one study's experiment:

- one *parent* run (``ROLE_TAG = ROLE_STUDY``) with the spec's params (``search.*``, ``validation.*``, ...), the
  :data:`PARENT_TAGS`, summary metrics (:data:`SUMMARY_SUFFIXES` with one final group) and :data:`FINAL_SUMMARY_FILE`;
- one *child* run per Ray trial (``ROLE_TAG = ROLE_TRIAL``, ``PARENT_TAG`` = the parent's run id) with the trial's
  flattened config as params, the :data:`TRIAL_TAGS`, per-epoch metrics and the trial's artifacts.
"""

from __future__ import annotations

from typing import Final

from trainables.schema.metric_names import SUMMARY_SUFFIXES

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
    "RACE_FILE",
    "RACE_MEAN",
    "RACE_MISSING",
    "RACE_COLUMNS",
    "RACE_EXPERIMENT",
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
    "replicate_label",
    "replicate_of",
    "RUN_NAME_SEP",
    "GROUP_ALL",
    "NOTE_TAG",
    "search_run_name",
    "final_run_name",
    "SPEC_FILE",
    "TABLE_SPEC_FILE",
    "SLURM_SCRIPT_FILE",
    "SLURM_JOB_FILE",
    "SLURM_LOG_FILE",
    "RUN_PROGRESS_FILE",
    "SLURM_RUNS_FILE",
    "DRIVER_WALLS_FILE",
    "TABLE_REPORT_FILE",
    "NONFINITE_MARKER",
    "CHECKPOINT_EPOCH_FILE",
    "trial_dir",
    "FINAL_SUMMARY_FILE",
    "FINAL_CATEGORY_FILE",
    "FINAL_CATEGORY_COLUMNS",
    "FINAL_SUMMARY_KEY_COLUMNS",
    "SUMMARY_MEAN",
    "SUMMARY_STD",
    "SUMMARY_CI_LOW",
    "SUMMARY_CI_HIGH",
    "SUMMARY_SUFFIXES",
    "CLASS_WEIGHTS_FILE",
    "WEIGHTS_EPOCH",
    "WEIGHTS_CLASS",
    "WEIGHTS_COUNT",
    "WEIGHTS_CLASS_MEAN",
    "WEIGHTS_NOISY_SHARE",
    "CLASS_WEIGHTS_COLUMNS",
    "SAMPLE_WEIGHTS_FILE",
    "SAMPLE_INDEX",
    "SAMPLE_LABEL",
    "SAMPLE_NOISY",
    "SAMPLE_WEIGHT",
    "SAMPLE_WEIGHTS_COLUMNS",
    "TRAIN_LABELS_FILE",
    "best_metric",
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
    "ENV_PREFIX",
    "ENV_TAGS",
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
#: A table's reference family (``reference:`` of a table spec, docs/tables.md): the dashboards compare with it.
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


# ---------------------------------------------------------------------------------------------- study directory
# ``storage/<name>/``: :class:`study.intake.layout.StudyLayout` builds every path from these; readers use it or these names.

#: Where studies live when the spec names no ``storage``.
DEFAULT_STORAGE: Final = "runs"
#: The validated spec the study was started with (resume refuses a different one).
SPEC_FILE: Final = "spec.yaml"
#: The libraries' start-up lines and warnings (Ray, MLflow, Optuna), kept off the terminal.
STUDY_LOG_FILE: Final = "study.log"
#: ``dmlstudy slurm`` (study.deploy.slurm): the sbatch script it wrote and submitted, the Slurm job id it got (one
#: line; ``dmlstudy status`` asks Slurm about it), and the job's output, every requeued run appended (``%j``: the id).
SLURM_SCRIPT_FILE: Final = "slurm.sbatch"
SLURM_JOB_FILE: Final = "slurm_job_id"
SLURM_LOG_FILE: Final = "slurm-%j.out"
#: What the driver's last run did (study.runtime.run_progress): the epochs it checkpointed, its start-up and epoch
#: seconds, the signal it stopped on and its exit code; a job script reads it to decide whether a requeue gains anything.
RUN_PROGRESS_FILE: Final = "run_progress.json"
#: ``dmlstudy slurm`` (study.deploy.slurm.records): one JSON line per run of the study's jobs, appended as the run
#: ends (the job, the run, its RUN_PROGRESS_FILE record, how it ended), so a run that measured no epoch knows an
#: earlier run's times.
SLURM_RUNS_FILE: Final = "slurm_runs.jsonl"
#: Every driver run of a study (study.runtime.run_progress): one JSON line each, appended as it exits (its end, its
#: wall seconds, whether it resumed, its exit code), so the report's whole-run slot use counts every driver's wall.
DRIVER_WALLS_FILE: Final = "driver_walls.jsonl"
#: Optuna's RDB storage (study name = spec name), unless ``tracking.optuna_uri`` names a server.
OPTUNA_DB: Final = "optuna.db"
#: MLflow's sqlite store, unless ``tracking.uri`` names a server; also the local tracking server's backend.
MLFLOW_DB: Final = "mlflow.db"
#: The artifact root of a non-served MLflow store.
MLFLOW_ARTIFACTS_DIR: Final = "mlflow-artifacts"
#: A table study's spec, as it was started (a resume refuses another).
TABLE_SPEC_FILE: Final = "table.yaml"
#: A table study's report (``python -m study.run TABLE.yaml``): the comparison tables and each cell's winner.
TABLE_REPORT_FILE: Final = "table.md"
#: Ray Tune's experiment of the search, and of the final test stage.
SEARCH_EXPERIMENT: Final = "tune"
FINAL_EXPERIMENT: Final = "tune_final"
#: Ray Tune's experiment of the finalist race (``final.race``), and the race's standings on the parent run (CSV: per
#: group and finalist its search value, its race values, its race runs missing (failed or short), the mean, and which
#: one won).
RACE_EXPERIMENT: Final = "tune_race"
RACE_FILE: Final = "race.csv"
#: :data:`RACE_FILE`'s columns (the writer, ``study.final.race.race_csv``, and its readers name them from here).
RACE_MEAN: Final = "race_mean"
#: ``race_missing``: the finalist's race runs that failed, stopped short or reported no finite objective.
RACE_MISSING: Final = "race_missing"
RACE_COLUMNS: Final = (
    GROUP,
    SOURCE_TRIAL,
    "optuna_number",
    "search_value",
    "race_values",
    RACE_MISSING,
    RACE_MEAN,
    "winner",
)
#: Inside a trial's folder of its experiment (:func:`trial_dir`): the error of a loss that was not finite, written by
#: the loop before the trial fails. A retry (``--max-failures``) then fails at once, and a table counts the trial as
#: evaluated (its configuration failed) instead of replacing it (study/search/cell_search.py).
NONFINITE_MARKER: Final = "nonfinite_loss.txt"
#: In each of a trial's checkpoints, beside the state: ``{"training_iteration": epoch}``, the epoch it holds (a trial
#: reports once an epoch, so it is Ray's count too). A restored driver reads it when Ray's snapshot names a
#: checkpoint Ray has since deleted, to resume the trial from the one that replaced it
#: (study/runtime/checkpoint_repair.py).
CHECKPOINT_EPOCH_FILE: Final = "epoch.json"
#: The ASHA scheduler's rungs (Ray does not restore a scheduler; the study does).
ASHA_STATE_FILE: Final = "asha_state.pkl"
#: The comparison dashboard: the folder (also the parent run's artifact path), its page and its figures.
DASHBOARD_DIR: Final = "dashboard"
DASHBOARD_PAGE: Final = "index.html"
DASHBOARD_FIGURES_DIR: Final = "figures"


#: The local tracking server's folder (``python -m study.tracking.server DIR``): :data:`MLFLOW_DB`, the artifacts it
#: serves and its log.
SERVER_ARTIFACTS_DIR: Final = "artifacts"
SERVER_LOG: Final = "server.log"


def replicate_label(label: str, replicate: int) -> str:
    """The label of replicate ``replicate`` of a search (``search.replicates``): a table's cell label or a study's
    name, which is replicate 0's; ``<label>.r<replicate>`` after (its Optuna study and its final runs' group)."""
    return label if replicate == 0 else f"{label}.r{replicate}"


def replicate_of(label: str) -> int:
    """Which replicate a label of a replicated table or study names (:func:`replicate_label`: 0 without a suffix)."""
    head, dot_r, index = label.rpartition(".r")
    return int(index) if head and dot_r and index.isdigit() else 0


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


# ---------------------------------------------------------------------------------------------------- artifacts
#: The parent run's table of the final stage: one row per group, :data:`FINAL_SUMMARY_KEY_COLUMNS` then
#: ``<test metric><suffix>`` for every :data:`SUMMARY_SUFFIXES` (and ``fold_ensemble/`` values with k-fold).
FINAL_SUMMARY_FILE: Final = "final_summary.csv"
FINAL_SUMMARY_KEY_COLUMNS: Final = (GROUP, SOURCE_TRIAL, "seeds")
#: The parent run's per-category table of the final stage (a CSV dataset with a ``category`` column): one row per
#: group, category and metric (:data:`~trainables.schema.metric_names.CATEGORY_METRICS`) with :data:`FINAL_CATEGORY_COLUMNS`.
FINAL_CATEGORY_FILE: Final = "final_per_category.csv"
FINAL_CATEGORY_COLUMNS: Final = (GROUP, "category", "metric", "seeds", "mean", "std", "ci95_low", "ci95_high")
#: Suffixes of a metric's summary over the final seeds: mean, sample std, Student's t 95 % interval (defined with the
#: metric names, which name them first).
SUMMARY_MEAN, SUMMARY_STD, SUMMARY_CI_LOW, SUMMARY_CI_HIGH = SUMMARY_SUFFIXES

#: Per epoch and observed class (``trainables/loop/diagnostics.py``): the per-class weight trajectory.
CLASS_WEIGHTS_FILE: Final = "class_weights.parquet"
WEIGHTS_EPOCH: Final = "epoch"
WEIGHTS_CLASS: Final = "class"
WEIGHTS_COUNT: Final = "n"
WEIGHTS_CLASS_MEAN: Final = "mean_weight"
WEIGHTS_NOISY_SHARE: Final = "noisy_share"
CLASS_WEIGHTS_COLUMNS: Final = (WEIGHTS_EPOCH, WEIGHTS_CLASS, WEIGHTS_COUNT, WEIGHTS_CLASS_MEAN, WEIGHTS_NOISY_SHARE)
#: Per training sample, at the trial's last epoch: its weight and recorded noise flag.
SAMPLE_WEIGHTS_FILE: Final = "sample_weights.parquet"
SAMPLE_INDEX: Final = "index"
SAMPLE_LABEL: Final = "label"
SAMPLE_NOISY: Final = "noisy"
SAMPLE_WEIGHT: Final = "weight"
SAMPLE_WEIGHTS_COLUMNS: Final = (SAMPLE_INDEX, SAMPLE_LABEL, SAMPLE_NOISY, SAMPLE_WEIGHT)
#: Folder inside a trial checkpoint whose files become MLflow artifacts of the trial's run.
ARTIFACTS_DIR: Final = "artifacts"
#: Artifact of a paired test split (``flows2d``): ``view0``, ``view1`` (each view's raw model output, (n, D)) and
#: ``latent`` (the z each test pair was made from); written by the loop, drawn by ``dashboards/panels/paired.py``.
PAIRED_EMBEDDINGS_FILE: Final = "paired_test_embeddings.npz"
#: The trial's observed and true training labels (``trainables/loop.py``).
TRAIN_LABELS_FILE: Final = "train_labels.npz"

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

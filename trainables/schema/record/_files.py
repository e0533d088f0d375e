"""The study directory's files and the artifacts' file names and columns (re-exported by
:mod:`trainables.schema.record`)."""

from __future__ import annotations

from typing import Final

from trainables.schema.metric_names import SUMMARY_SUFFIXES
from trainables.schema.record._runs import GROUP, SOURCE_TRIAL

__all__ = [
    "RACE_FILE",
    "RACE_MEAN",
    "RACE_MISSING",
    "RACE_COLUMNS",
    "RACE_EXPERIMENT",
    "replicate_label",
    "replicate_of",
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
    "DEFAULT_STORAGE",
    "STUDY_LOG_FILE",
    "OPTUNA_DB",
    "MLFLOW_DB",
    "MLFLOW_ARTIFACTS_DIR",
    "SEARCH_EXPERIMENT",
    "FINAL_EXPERIMENT",
    "ASHA_STATE_FILE",
    "SCHEDULER_STATE_FILE",
    "SCHEDULER_STATE_SCHEMA",
    "SCHEDULER_STATE_VERSION",
    "DASHBOARD_DIR",
    "DASHBOARD_PAGE",
    "DASHBOARD_FIGURES_DIR",
    "SERVER_ARTIFACTS_DIR",
    "SERVER_LOG",
    "ARTIFACTS_DIR",
    "PAIRED_EMBEDDINGS_FILE",
]

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
#: What the driver's last run did (study.runtime.driver_run): the epochs it checkpointed, its start-up and epoch
#: seconds, the signal it stopped on and its exit code; a job script reads it to decide whether a requeue gains anything.
RUN_PROGRESS_FILE: Final = "run_progress.json"
#: ``dmlstudy slurm`` (study.deploy.slurm.records): one JSON line per run of the study's jobs, appended as the run
#: ends (the job, the run, its RUN_PROGRESS_FILE record, how it ended), so a run that measured no epoch knows an
#: earlier run's times.
SLURM_RUNS_FILE: Final = "slurm_runs.jsonl"
#: Every driver run of a study (study.runtime.driver_run): one JSON line each, appended as it exits (its end, its
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
#: The search scheduler's state (Ray does not restore a scheduler; the study does): versioned JSON
#: (study/search/scheduler_state.py), with its schema name and version.
SCHEDULER_STATE_FILE: Final = "scheduler_state.json"
SCHEDULER_STATE_SCHEMA: Final = "dmlstudy.scheduler_state"
SCHEDULER_STATE_VERSION: Final = 1
#: The same state as studies started before the JSON file kept it (a pickle of Ray's schedulers): read once, then
#: replaced by :data:`SCHEDULER_STATE_FILE`.
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

"""Read a study's MLflow runs into polars frames (the dashboards read MLflow only, never ``trainables``).

One :class:`DashboardData` holds every experiment asked for:

- ``runs``: one row per trial (child) run — ``run_id``, ``experiment``, ``trial_id``, ``status``,
  ``start_time`` (ms), the grouping tags (``family``, ``dataset``, ``noise_kind``, ``noise_ratio`` as a
  float, ``subset``, ``seed``), the selection tags (``stage``: ``search`` or ``final``, ``search`` for runs
  without the tag; ``validation``, ``selection``; final runs' ``group`` and ``source_trial``, the
  ``trial_id`` of the search run whose configuration they retrain), ``config`` (the trial's params without
  its seeds, so runs that differ only by seed share it), ``p/<param>`` (params as logged, strings) and
  ``m/<metric>`` (the metric's last value, as MLflow keeps it: the value at the highest step; retrieval
  metrics carry their split, ``val/recall_at_1``, ``test/recall_at_1``);
- ``history``: every logged metric value, long format ``run_id, key, step, value``;
- ``class_weights``: ``run_id, epoch, class, avg_weight`` from the runs' ``class_weights.parquet`` artifacts, when
  present (columns: :data:`trainables.schema.record.CLASS_WEIGHTS_COLUMNS`);
- ``sample_weights``: ``run_id, weight, noisy``, each sample's last weight and recorded noise flag
  (``sample_weights.parquet``: :data:`trainables.schema.record.SAMPLE_WEIGHTS_COLUMNS`);
- ``paired``: run id → the arrays of its paired-test artifact (``flows2d``: ``view0``, ``view1``, ``latent``).

Every tag, value, param key and file name is read through :mod:`trainables.schema.record`, which the tracker writes with. The
searched parameters come from the study's ``spec.yaml`` (in the ``study_dir`` the parent run names), falling back to
the parent's flattened ``search.space.*`` params when that file is gone (a store copied without its directory).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from dashboards.artifacts import load_final_summary, load_paired, load_weight_tables
from dashboards.study_info import StudyInfo, float_or_none, read_study_info
from study.tracking.doors import mlflow_client
from trainables.schema import record as R
from trainables.schema.metric_names import (
    OBJECTIVE,
)
from trainables.schema.space import Mode

# One tqdm bar per downloaded parquet file would flood the end of every study's output.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

if TYPE_CHECKING:
    pass

__all__ = [
    "DashboardError",
    "StudyInfo",
    "DashboardData",
    "load",
    "resolve_tracking_uri",
    "PARAM",
    "METRIC",
    "SEARCH_STAGE",
    "FINAL_STAGE",
]

#: Column prefixes of params and last metric values in ``DashboardData.runs``.
PARAM = "p/"
METRIC = "m/"
GROUP_TAGS = (R.FAMILY, R.DATASET, R.NOISE_KIND, R.SUBSET, R.SEED, R.TRIAL_ID)
SEARCH_STAGE, FINAL_STAGE = R.STAGE_SEARCH, R.STAGE_FINAL
# Params that only pick a seed: runs differing in these alone are repeats of one configuration.
_SEED_PARAMS = (R.SEED,)
_SEED_SUFFIX = ".seed"


class DashboardError(Exception):
    """Bad input for a dashboard (unknown experiment, empty or missing store): one line, exit 2."""


@dataclass
class DashboardData:
    tracking_uri: str
    studies: list[StudyInfo]
    runs: pl.DataFrame
    history: pl.DataFrame
    class_weights: pl.DataFrame
    sample_weights: pl.DataFrame
    paired: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The parent runs' stored final summaries (``experiment`` + :data:`trainables.schema.record.FINAL_SUMMARY_FILE`'s columns).
    final_summary: pl.DataFrame = field(default_factory=pl.DataFrame)
    loaded_at: float = field(default_factory=time.time)

    @property
    def metric(self) -> str:
        """The objective the leaderboard ranks by: the studies' common ``search.metric`` (else Recall@1)."""
        metrics = {s.metric for s in self.studies}
        return metrics.pop() if len(metrics) == 1 else OBJECTIVE

    @property
    def mode(self) -> Mode:
        modes = {s.mode for s in self.studies if s.metric == self.metric}
        return modes.pop() if len(modes) == 1 else "max"

    def selection_notes(self) -> list[str]:
        """One warning per study whose hyperparameters were selected on the test classes."""
        return [
            f"Study {s.experiment!r}: hyperparameters were selected on the test classes (validation.kind: "
            f"{s.validation or 'none'}, search metric {s.metric}), so its test numbers are optimistic, not an "
            "unbiased estimate."
            for s in self.studies
            if s.selection == "test"
        ]

    def has_metric(self, name: str) -> bool:
        column = METRIC + name
        return column in self.runs.columns and self.runs[column].drop_nulls().len() > 0

    def first_replicate(self) -> DashboardData:
        """The data with the final runs of a replicated study's (or table's) replicates 1 … R−1 left out: the panels
        summarise final runs per family × condition as seeds, and pooling R searches' winners as if they were seeds of
        one would hide the search's own variance (the table report and a study's summary show all R, with it)."""
        replicated = [s.experiment for s in self.studies if s.replicates > 1]
        if not replicated or R.GROUP not in self.runs.columns:
            return self
        later = (
            pl.col("experiment").is_in(replicated)
            & (pl.col(R.STAGE) == FINAL_STAGE)
            & (pl.col(R.GROUP).map_elements(R.replicate_of, return_dtype=pl.Int64) > 0)
        )
        return dataclasses.replace(self, runs=self.runs.filter(~later))

    def replicate_notes(self) -> list[str]:
        """One sentence per replicated study: what :meth:`first_replicate` shows of it."""
        return [
            f"Study {s.experiment!r} searched {s.replicates} times (search.replicates): the final-stage panels show "
            "replicate 0's winner on its seeds, the study as it would have run without replicates; the search "
            "panels show every replicate's trials. All replicates' final runs, with the search's own variance in "
            "the interval, are in the table report (a study: its printed summary)."
            for s in self.studies
            if s.replicates > 1
        ]

    def running_notes(self) -> list[str]:
        """One sentence per study that is still running (its parent run or some trial is RUNNING)."""
        notes = []
        for s in self.studies:
            runs = self.runs.filter(pl.col("experiment") == s.experiment)
            live = runs.filter(pl.col("status") == "RUNNING").height
            if s.status == "RUNNING" or live:
                planned = f" of {s.num_trials_planned} planned" if s.num_trials_planned else ""
                search = runs.filter(pl.col(R.STAGE).fill_null(SEARCH_STAGE) == SEARCH_STAGE).height
                final = runs.height - search
                stage = f", {final} final-stage runs" if final or s.stage == FINAL_STAGE else ""
                notes.append(
                    f"Study {s.experiment!r} is still running: {search} trials logged{planned}{stage}, "
                    f"{live} running now; this page shows what existed when it was built."
                )
        return notes

    def history_of(self, run_ids: list[str], key: str) -> pl.DataFrame:
        return self.history.filter(pl.col("run_id").is_in(run_ids) & (pl.col("key") == key)).sort("run_id", "step")


def resolve_tracking_uri(uri: str | None, experiments: list[str]) -> str:
    """``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``runs/<experiment>/mlflow.db`` if it exists."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        guess = Path(R.DEFAULT_STORAGE) / experiments[0] / R.MLFLOW_DB
        if not guess.is_file():
            raise DashboardError(f"--tracking-uri: not given, $MLFLOW_TRACKING_URI unset and no {guess}")
        uri = f"sqlite:///{guess.resolve()}"
    if uri.startswith("sqlite:///"):
        # MLflow would silently create an empty database at a wrong path; refuse instead.
        path = Path(uri.removeprefix("sqlite:///").split("?")[0])  # a URL query is not part of the path
        if not path.is_file():
            raise DashboardError(f"--tracking-uri: no MLflow store at {path}")
    return uri


def _config_key(params: dict[str, str]) -> str:
    return json.dumps(
        {k: v for k, v in sorted(params.items()) if k not in _SEED_PARAMS and not k.endswith(_SEED_SUFFIX)}
    )


def _trial_row(experiment: str, run: Any) -> dict[str, Any]:
    """One row of :attr:`DashboardData.runs`: the trial run's identity, grouping and selection tags, params, metrics."""
    tags = run.data.tags
    row: dict[str, Any] = {
        "run_id": run.info.run_id,
        "experiment": experiment,
        "status": run.info.status,
        "start_time": run.info.start_time,
        R.NOISE_RATIO: float_or_none(tags.get(R.NOISE_RATIO)) or 0.0,
        "config": _config_key(run.data.params),
    }
    row.update({t: tags.get(t, "") for t in GROUP_TAGS})
    row.update({t: tags.get(t, "") for t in R.SELECTION_TAGS})
    row[R.STAGE] = row[R.STAGE] or SEARCH_STAGE
    # The name only for a run without the tag (not the study's: its runs all carry it, and are named for a person).
    row[R.TRIAL_ID] = row[R.TRIAL_ID] or run.info.run_name
    row[R.OPTUNA_TRIAL_NUMBER] = tags.get(R.OPTUNA_TRIAL_NUMBER, "")  # the best rule's tie-break
    row.update({PARAM + k: v for k, v in run.data.params.items()})
    row.update({METRIC + k: float(v) for k, v in run.data.metrics.items()})
    return row


def load(tracking_uri: str, experiments: list[str], scratch: Path, *, details: bool = True) -> DashboardData:
    """Read the parent and trial runs of ``experiments``; raise :class:`DashboardError` on bad input.

    ``details=False`` reads the runs' last values only: no metric histories, no artifacts (what the comparison
    tables need, at a fraction of the requests)."""
    client = mlflow_client(tracking_uri)
    studies, rows, history = [], [], []
    parent_ids: dict[str, str] = {}
    for name in experiments:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            known = [e.name for e in client.search_experiments() if e.name != "Default"]
            raise DashboardError(
                f"--experiment: unknown experiment {name!r} in {tracking_uri}; known: {', '.join(known) or 'none'}"
            )
        runs = client.search_runs([experiment.experiment_id], max_results=50000)
        parents = sorted(
            (r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_STUDY), key=lambda r: r.info.start_time
        )
        parent = parents[-1] if parents else None
        trials = [r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_TRIAL]
        if parent is not None:
            trials = [r for r in trials if r.data.tags.get(R.PARENT_TAG) == parent.info.run_id]
        if not trials:
            raise DashboardError(f"--experiment: experiment {name!r} has no trial runs in {tracking_uri}")
        studies.append(read_study_info(client, experiment, parent, trials))
        if parent is not None:
            parent_ids[name] = parent.info.run_id
        for run in trials:
            rows.append(_trial_row(name, run))
            for key in run.data.metrics if details else ():
                for m in client.get_metric_history(run.info.run_id, key):
                    history.append((run.info.run_id, key, int(m.step), float(m.value)))
    frame = pl.DataFrame(rows, infer_schema_length=None)
    frame = frame.with_columns(pl.col(c).cast(pl.Float64) for c in frame.columns if c.startswith(METRIC))
    hist = pl.DataFrame(
        history, schema={"run_id": pl.Utf8, "key": pl.Utf8, "step": pl.Int64, "value": pl.Float64}, orient="row"
    )
    run_ids = frame["run_id"].to_list() if details else []
    per_class, per_sample = load_weight_tables(client, run_ids, scratch)
    return DashboardData(
        tracking_uri=tracking_uri,
        studies=studies,
        runs=frame,
        history=hist,
        class_weights=per_class,
        sample_weights=per_sample,
        paired=load_paired(client, run_ids, scratch),
        final_summary=load_final_summary(client, parent_ids, scratch) if details else pl.DataFrame(),
    )

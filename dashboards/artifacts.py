"""The artifacts a dashboard reads, by the names and columns :mod:`trainables.schema.record` gives them: the runs' weight tables
(``class_weights.parquet``, ``sample_weights.parquet``), their paired-test arrays, and the parent run's
``final_summary.csv`` (the final stage's stored summary, which the tables show instead of recomputing it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from trainables.schema import record as R
from trainables.schema.record import PAIRED_EMBEDDINGS_FILE

if TYPE_CHECKING:
    from study.tracking import MlflowClient

__all__ = ["load_weight_tables", "load_paired", "load_final_summary", "class_weight_table", "sample_weight_table"]

_MAX_ARTIFACT_DEPTH = 3


def _find_artifacts(
    client: MlflowClient, run_id: str, path: str | None = None, depth: int = 0, suffix: str = ".parquet"
) -> list[str]:
    found = []
    for item in client.list_artifacts(run_id, path):
        if item.is_dir and depth < _MAX_ARTIFACT_DEPTH:
            found += _find_artifacts(client, run_id, item.path, depth + 1, suffix)
        elif item.path.endswith(suffix):
            found.append(item.path)
    return found


def _find_parquets(client: MlflowClient, run_id: str) -> list[str]:
    """The run's weight tables (:data:`trainables.schema.record.CLASS_WEIGHTS_FILE`, :data:`~trainables.schema.record.SAMPLE_WEIGHTS_FILE`)."""
    names = (R.CLASS_WEIGHTS_FILE, R.SAMPLE_WEIGHTS_FILE)
    return [path for path in _find_artifacts(client, run_id) if Path(path).name in names]


def load_paired(client: MlflowClient, run_ids: list[str], scratch: Path) -> dict[str, dict[str, Any]]:
    """Each run's paired-test arrays (``PAIRED_EMBEDDINGS_FILE``), for the runs that logged one."""
    import numpy as np

    paired = {}
    for run_id in run_ids:
        for path in _find_artifacts(client, run_id, suffix=PAIRED_EMBEDDINGS_FILE):
            (scratch / run_id).mkdir(parents=True, exist_ok=True)
            with np.load(client.download_artifacts(run_id, path, str(scratch / run_id))) as arrays:
                paired[run_id] = {k: arrays[k] for k in arrays.files}
    return paired


def class_weight_table(frame: pl.DataFrame) -> pl.DataFrame | None:
    """Normalise a per-class weight parquet to ``epoch, class, avg_weight``; None if it is something else."""
    if not {R.WEIGHTS_EPOCH, R.WEIGHTS_CLASS, R.WEIGHTS_CLASS_MEAN} <= set(frame.columns):
        return None
    return frame.select(
        pl.col(R.WEIGHTS_EPOCH).cast(pl.Int64).alias("epoch"),
        pl.col(R.WEIGHTS_CLASS).cast(pl.Utf8).alias("class"),
        pl.col(R.WEIGHTS_CLASS_MEAN).cast(pl.Float64).alias("avg_weight"),
    )


def sample_weight_table(frame: pl.DataFrame) -> pl.DataFrame | None:
    """A per-sample table (:data:`trainables.schema.record.SAMPLE_WEIGHTS_COLUMNS`) → ``weight, noisy``."""
    if not {R.SAMPLE_WEIGHT, R.SAMPLE_NOISY} <= set(frame.columns):
        return None
    return frame.select(
        pl.col(R.SAMPLE_WEIGHT).cast(pl.Float64).alias("weight"), pl.col(R.SAMPLE_NOISY).cast(pl.Boolean).alias("noisy")
    )


def load_weight_tables(client: MlflowClient, run_ids: list[str], scratch: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-class weight trajectories and final per-sample weights from the runs' parquet artifacts."""
    per_class: list[pl.DataFrame] = []
    per_sample: list[pl.DataFrame] = []
    for run_id in run_ids:
        for path in _find_parquets(client, run_id):
            (scratch / run_id).mkdir(parents=True, exist_ok=True)
            table = pl.read_parquet(client.download_artifacts(run_id, path, str(scratch / run_id)))
            for reader, found in ((class_weight_table, per_class), (sample_weight_table, per_sample)):
                normalised = reader(table)
                if normalised is not None:
                    found.append(normalised.with_columns(pl.lit(run_id).alias("run_id")))
    class_schema = {"epoch": pl.Int64, "class": pl.Utf8, "avg_weight": pl.Float64, "run_id": pl.Utf8}
    sample_schema = {"weight": pl.Float64, "noisy": pl.Boolean, "run_id": pl.Utf8}
    return (
        pl.concat(per_class) if per_class else pl.DataFrame(schema=class_schema),
        pl.concat(per_sample) if per_sample else pl.DataFrame(schema=sample_schema),
    )


def load_final_summary(client: MlflowClient, parents: dict[str, str], scratch: Path) -> pl.DataFrame:
    """``experiment`` and the columns of each parent run's :data:`~trainables.schema.record.FINAL_SUMMARY_FILE` (empty when no
    study stored one: no final stage, a study still in it, or a store written before the file existed)."""
    frames = []
    for experiment, run_id in parents.items():
        if not any(a.path == R.FINAL_SUMMARY_FILE for a in client.list_artifacts(run_id)):
            continue
        (scratch / run_id).mkdir(parents=True, exist_ok=True)
        path = client.download_artifacts(run_id, R.FINAL_SUMMARY_FILE, str(scratch / run_id))
        frame = pl.read_csv(path, schema_overrides={R.GROUP: pl.Utf8, R.SOURCE_TRIAL: pl.Utf8})
        frames.append(frame.with_columns(pl.lit(experiment).alias("experiment")))
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()

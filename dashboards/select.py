"""Which runs a panel shows: the best configuration of each family × dataset × noise setting, over seeds."""

from __future__ import annotations

import json

import polars as pl

from dashboards.load import METRIC, PARAM, DashboardData

__all__ = ["GROUP", "scored_runs", "best_configs", "varying_params", "params_text", "fmt"]

#: One leaderboard row per group: a family on a dataset under one noise setting and training subset.
GROUP = ["family", "dataset", "noise_kind", "noise_ratio", "subset"]
# Params shown in the leaderboard only through the group columns, or that just pick seeds.
_SHOWN_ELSEWHERE = {"family", "dataset.name", "dataset.noise.kind", "dataset.noise.ratio", "dataset.subset"}


def scored_runs(data: DashboardData, metric: str | None = None) -> pl.DataFrame:
    """Runs that reported the objective (failed runs are left out; running ones count with what they have)."""
    column = METRIC + (metric or data.metric)
    if column not in data.runs.columns:
        return data.runs.clear()
    return data.runs.filter((pl.col("status") != "FAILED") & pl.col(column).is_not_null() & pl.col(column).is_finite())


def best_configs(data: DashboardData, extra_metrics: tuple[str, ...] = ()) -> pl.DataFrame:
    """Per group: the configuration with the best mean objective over its seeds, and the best single run.

    Columns: the :data:`GROUP` columns, ``config``, ``n_runs`` (its runs; a seed may repeat), ``seeds``
    (the distinct seed tags), ``mean``/``std`` of the objective,
    ``mean_<m>``/``std_<m>`` for each of ``extra_metrics``, ``run_ids`` (the configuration's runs),
    ``best_value``/``best_run_id``/``best_trial_id`` (the group's best single run, any configuration),
    ``best_params`` (that run's ``config``).
    """
    runs = scored_runs(data)
    if runs.is_empty():
        return pl.DataFrame()
    objective = METRIC + data.metric
    descending = data.mode == "max"
    aggs = [pl.len().alias("n_runs"), pl.col("seed").unique().sort().alias("seeds"), pl.col("run_id").alias("run_ids"),
            pl.col(objective).mean().alias("mean"), pl.col(objective).std().alias("std")]
    for m in extra_metrics:
        if METRIC + m in runs.columns:
            aggs += [pl.col(METRIC + m).mean().alias(f"mean_{m}"), pl.col(METRIC + m).std().alias(f"std_{m}")]
        else:
            aggs += [pl.lit(None, pl.Float64).alias(f"mean_{m}"), pl.lit(None, pl.Float64).alias(f"std_{m}")]
    per_config = runs.group_by([*GROUP, "config"]).agg(aggs)
    best_config = per_config.sort("mean", descending=descending).group_by(GROUP, maintain_order=True).first()
    best_run = (
        runs.sort(objective, descending=descending)
        .group_by(GROUP, maintain_order=True)
        .first()
        .select(*GROUP, pl.col(objective).alias("best_value"), pl.col("run_id").alias("best_run_id"),
                pl.col("trial_id").alias("best_trial_id"))
    )
    return best_config.join(best_run, on=GROUP).sort("family", "dataset", "subset", "noise_ratio")


def varying_params(data: DashboardData) -> list[str]:
    """Params (names without the prefix) that differ between runs: the searched ones, seeds excluded."""
    names = []
    for column in data.runs.columns:
        if not column.startswith(PARAM):
            continue
        name = column.removeprefix(PARAM)
        if name in _SHOWN_ELSEWHERE or name == "seed" or name.endswith(".seed"):
            continue
        if data.runs[column].drop_nulls().n_unique() > 1:
            names.append(name)
    return names


def fmt(value: object, digits: int = 4) -> str:
    """A number with ``digits`` significant digits; anything else as text; missing as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return "—" if value != value else f"{value:.{digits}g}"
    try:
        number = float(str(value))
    except ValueError:
        return str(value)
    return f"{number:.{digits}g}" if "." in str(value) or "e" in str(value).lower() else str(value)


def params_text(config: str, names: list[str]) -> str:
    """``name=value, ...`` of ``names`` in a run's ``config`` (params shortened to their last part)."""
    params = json.loads(config)
    parts = [f"{n.removeprefix('params.')}={fmt(params[n])}" for n in names if n in params]
    return ", ".join(parts)

"""Which runs a panel shows: the best configuration of each family × dataset × noise setting, over seeds.

Selection follows the study's protocol: configurations are ranked by the search metric over **search-stage**
runs only (``val/…`` with validation on, ``test/…`` with ``validation.kind: none``); the final stage's runs
(the selected configuration retrained with several seeds, evaluated on the test classes) are summarised
per final group with Student's t 95 % interval, the same numbers the study logs on its parent run. "Best" is
:func:`study.final.best.pick_best`'s rule (best value, ties to the earliest trial: the smallest Optuna trial number), the one
the final stage retrains.
"""

from __future__ import annotations

import json
import math

import polars as pl

from dashboards.load import FINAL_STAGE, METRIC, PARAM, SEARCH_STAGE, DashboardData
from study.final.best import best_by_group

# The final stage's own rule (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n), one definition for the study and every table.
from study.final.intervals import t_interval
from trainables.schema import record as R
from trainables.schema.metric_names import SPLIT_PREFIXES, TEST_PREFIX, bounds_of
from trainables.schema.space import Mode

__all__ = [
    "GROUP",
    "decimals",
    "scored_runs",
    "search_runs",
    "final_runs",
    "between_runs",
    "best_configs",
    "summarise",
    "final_groups",
    "split_of",
    "base_name",
    "as_test",
    "varying_params",
    "params_text",
    "fmt",
    "ci_text",
]

#: One leaderboard row per group: a family on a dataset under one noise setting and training subset.
GROUP = [R.FAMILY, R.DATASET, R.NOISE_KIND, R.NOISE_RATIO, R.SUBSET]
# Params shown in the leaderboard only through the group columns, or that just pick seeds.
_SHOWN_ELSEWHERE = {R.FAMILY, "dataset.name", "dataset.noise.kind", "dataset.noise.ratio", "dataset.subset"}


def split_of(metric: str) -> str:
    """``val/`` or ``test/`` for a metric that carries its split, else ``""`` (training metrics, old stores)."""
    return next((p for p in SPLIT_PREFIXES if metric.startswith(p)), "")


def base_name(metric: str) -> str:
    """``val/recall_at_1`` → ``recall_at_1``."""
    return metric.removeprefix(split_of(metric))


def as_test(data: DashboardData, metric: str) -> str:
    """The test-split name of ``metric`` (``val/nmi`` → ``test/nmi``); a store written before metrics carried
    their split has the bare name instead, which is then returned."""
    base = base_name(metric)
    if not data.has_metric(TEST_PREFIX + base) and data.has_metric(base):
        return base
    return TEST_PREFIX + base


def search_runs(data: DashboardData) -> pl.DataFrame:
    """The search stage's runs (runs without a ``stage`` tag count as search runs): not the final stage's, nor those
    of a stage between them (their trials retrain the search's, on more seeds)."""
    return data.runs.filter(pl.col(R.STAGE).fill_null(SEARCH_STAGE) == SEARCH_STAGE)


def between_runs(data: DashboardData) -> pl.DataFrame:
    """The runs of the stages between the search and the final stage (validation only, priced as search trials),
    any status."""
    return data.runs.filter(~pl.col(R.STAGE).fill_null(SEARCH_STAGE).is_in([SEARCH_STAGE, FINAL_STAGE]))


def final_runs(data: DashboardData) -> pl.DataFrame:
    """The final stage's runs that finished every epoch (a running or failed final run is left out: its test
    numbers would be of a model trained for fewer epochs than the others)."""
    return data.runs.filter((pl.col(R.STAGE) == FINAL_STAGE) & (pl.col("status") == "FINISHED"))


def scored_runs(data: DashboardData, metric: str | None = None) -> pl.DataFrame:
    """Search-stage runs that reported the objective (failed runs are left out; running ones count with what
    they have). Final-stage runs never take part in selection."""
    column = METRIC + (metric or data.metric)
    if column not in data.runs.columns:
        return data.runs.clear()
    return search_runs(data).filter(
        (pl.col("status") != "FAILED") & pl.col(column).is_not_null() & pl.col(column).is_finite()
    )


def _t(
    values: list[float | None], bounds: tuple[float, float] | None = None
) -> tuple[int, float | None, float | None, float | None, float | None]:
    """``(n, mean, std, ci95_low, ci95_high)`` of the finite values (None where undefined), cut to ``bounds``."""
    x = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not x:
        return 0, None, None, None, None
    mean, std, low, high = (v if math.isfinite(v) else None for v in t_interval(x, bounds))
    return len(x), mean, std, low, high


def summarise(runs: pl.DataFrame, by: list[str], metrics: tuple[str, ...]) -> pl.DataFrame:
    """Per ``by`` group of ``runs``: ``n_runs``, ``seeds``, ``run_ids`` and, for each metric present,
    ``n_<m>``, ``mean_<m>``, ``std_<m>`` (sample std), ``lo_<m>``/``hi_<m>`` (Student's t 95 % interval of the
    mean; None for a single value)."""
    rows = []
    for key, part in runs.sort("start_time").group_by(by, maintain_order=True):
        row = dict(zip(by, key))
        row.update(n_runs=part.height, seeds=sorted(set(part[R.SEED].to_list())), run_ids=part["run_id"].to_list())
        for m in metrics:
            values = part[METRIC + m].to_list() if METRIC + m in part.columns else []
            n, mean, std, lo, hi = _t(values, bounds_of(m))
            row.update({f"n_{m}": n, f"mean_{m}": mean, f"std_{m}": std, f"lo_{m}": lo, f"hi_{m}": hi})
        rows.append(row)
    schema = {
        f"{k}_{m}": (pl.Int64 if k == "n" else pl.Float64) for m in metrics for k in ("n", "mean", "std", "lo", "hi")
    }
    return pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None) if rows else pl.DataFrame()


def final_groups(data: DashboardData, metrics: tuple[str, ...]) -> pl.DataFrame:
    """The final stage per study and final group (``group`` tag) and ``source_trial``: the :data:`GROUP`
    columns of its runs, and :func:`summarise`'s columns over its finished runs (one per final seed).

    Where the parent run stored the group's summary (``final_summary.csv``, written when the final stage ended),
    mean, std and interval are the stored ones (``stored`` is true): the page shows what the study decided, and a
    store without the file (a study still in its final stage, an older store) is summarised from its runs."""
    runs = final_runs(data)
    if runs.is_empty():
        return pl.DataFrame()
    table = summarise(runs, ["experiment", R.GROUP, R.SOURCE_TRIAL, *GROUP], metrics).sort("experiment", R.GROUP)
    return _with_stored(table, data.final_summary, metrics)


#: ``summarise``'s column prefix for each summary suffix of ``final_summary.csv``.
_STORED = {R.SUMMARY_MEAN: "mean_", R.SUMMARY_STD: "std_", R.SUMMARY_CI_LOW: "lo_", R.SUMMARY_CI_HIGH: "hi_"}


def _with_stored(table: pl.DataFrame, stored: pl.DataFrame, metrics: tuple[str, ...]) -> pl.DataFrame:
    """``table`` with each group's stored summary values in place of the computed ones, where stored."""
    keys = ["experiment", R.GROUP]
    columns = {
        f"{m}{suffix}": f"{prefix}{m}"
        for m in metrics
        for suffix, prefix in _STORED.items()
        if f"{m}{suffix}" in stored
    }
    if stored.is_empty() or not set(keys) <= set(stored.columns) or not columns:
        return table.with_columns(pl.lit(False).alias("stored"))
    picked = stored.select(
        *(pl.col(k).cast(pl.Utf8) for k in keys),
        *(pl.col(c).cast(pl.Float64).fill_nan(None).alias("_s_" + c) for c in columns),
        pl.lit(True).alias("stored"),
    ).unique(keys, keep="last")
    joined = table.join(picked, on=keys, how="left")
    return joined.with_columns(
        *(pl.coalesce("_s_" + c, target).alias(target) for c, target in columns.items()),
        pl.col("stored").fill_null(False),
    ).drop(["_s_" + c for c in columns])


def ci_text(mean: float | None, low: float | None, high: float | None, n: int) -> str:
    """``0.8123 [0.7900, 0.8346] (n=3)``: a mean with its 95 % interval and the number of values."""
    if mean is None:
        return "—"
    interval = f" [{low:.4f}, {high:.4f}]" if low is not None and high is not None else ""
    return f"{mean:.4f}{interval} (n={n})"


def best_configs(
    data: DashboardData, extra_metrics: tuple[str, ...] = (), runs: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per group: the configuration with the best mean objective over its seeds, and the best single run.

    Ranks the search-stage runs (:func:`scored_runs`, or ``runs``, a subset of them). Columns: the
    :data:`GROUP` columns, ``config``, ``n_runs`` (its runs; a seed may repeat), ``seeds`` (the distinct seed
    tags), ``mean``/``std`` of the objective, ``mean_<m>``/``std_<m>`` for each of ``extra_metrics``,
    ``run_ids``/``trial_ids`` (the configuration's runs), ``experiments`` (their studies),
    ``best_value``/``best_run_id``/``best_trial_id`` (the group's best single run, any configuration).
    """
    runs = scored_runs(data) if runs is None else runs
    if runs.is_empty():
        return pl.DataFrame()
    objective = METRIC + data.metric
    aggs = [
        pl.len().alias("n_runs"),
        pl.col(R.SEED).unique().sort().alias("seeds"),
        pl.col("run_id").alias("run_ids"),
        pl.col(R.TRIAL_ID).alias("trial_ids"),
        pl.col("experiment").unique().alias("experiments"),
        pl.col(objective).mean().alias("mean"),
        pl.col(objective).std().alias("std"),
    ]
    for m in extra_metrics:
        if METRIC + m in runs.columns:
            aggs += [pl.col(METRIC + m).mean().alias(f"mean_{m}"), pl.col(METRIC + m).std().alias(f"std_{m}")]
        else:
            aggs += [pl.lit(None, pl.Float64).alias(f"mean_{m}"), pl.lit(None, pl.Float64).alias(f"std_{m}")]
    runs = runs.with_columns(_creation_order(runs))
    per_config = runs.group_by([*GROUP, "config"]).agg(*aggs, pl.col("_order").min().alias("_first_trial"))
    best_config = _best_per_group(per_config, "mean", "_first_trial", data.mode).drop("_first_trial")
    best_run = _best_per_group(runs, objective, "_order", data.mode).select(
        *GROUP,
        pl.col(objective).alias("best_value"),
        pl.col("run_id").alias("best_run_id"),
        pl.col(R.TRIAL_ID).alias(R.BEST_TRIAL_ID),
    )
    return best_config.join(best_run, on=GROUP).sort(R.FAMILY, R.DATASET, R.SUBSET, R.NOISE_RATIO)


def _creation_order(runs: pl.DataFrame) -> pl.Expr:
    """``_order``: the tie-break key of :func:`study.final.stage.creation_order` as one sortable string: the zero-padded
    Optuna trial number (tag :data:`~trainables.schema.record.OPTUNA_TRIAL_NUMBER`), else ``~`` and the trial id (after them)."""
    fallback = pl.lit("~") + pl.col(R.TRIAL_ID)
    if R.OPTUNA_TRIAL_NUMBER not in runs.columns:
        return fallback.alias("_order")
    number = pl.col(R.OPTUNA_TRIAL_NUMBER).cast(pl.Utf8)
    return pl.when(number.is_not_null() & (number != "")).then(number.str.zfill(12)).otherwise(fallback).alias("_order")


def _best_per_group(frame: pl.DataFrame, value: str, trial_id: str, mode: Mode) -> pl.DataFrame:
    """Per :data:`GROUP`, the row :func:`study.final.best.pick_best` picks: best ``value``, ties to the smallest
    ``trial_id`` key (``_order``: the earliest trial, the rule the final stage retrains by, so a page and its study
    agree)."""
    picked = best_by_group(
        frame.iter_rows(named=True),
        lambda r: tuple(r[g] for g in GROUP),
        lambda r: r[value],
        lambda r: r[trial_id],
        mode,
    )
    return pl.DataFrame(list(picked.values()), schema=frame.schema)


def varying_params(data: DashboardData) -> list[str]:
    """Params (names without the prefix) that differ between runs: the searched ones, seeds excluded."""
    names = []
    for column in data.runs.columns:
        if not column.startswith(PARAM):
            continue
        name = column.removeprefix(PARAM)
        if name in _SHOWN_ELSEWHERE or name == R.SEED or name.endswith(".seed"):
            continue
        if data.runs[column].drop_nulls().n_unique() > 1:
            names.append(name)
    return names


def decimals(value: object) -> str:
    """A metric as the tables show it: 4 decimals (an interval's ends alike), or 4 significant digits where 4
    decimals would hide it (below 0.001) or it is huge; missing as an em dash; anything else as :func:`fmt`."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e6 else f"{value:.4g}"
    if isinstance(value, float) and math.isinf(value):
        return str(value)
    return fmt(value)


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

"""Leaderboard: the best configuration per family × dataset × noise setting by the search metric (search-stage runs
only), mean ± std over its runs (seeds), and beside it the final stage's test mean with its 95 % interval."""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboards.load import METRIC, DashboardData
from dashboards.panels import Panel
from dashboards.select import (
    as_test,
    best_configs,
    ci_text,
    decimals,
    final_groups,
    params_text,
    scored_runs,
    split_of,
    varying_params,
)
from trainables.schema import record as R
from trainables.schema.metric_names import MAP_AT_R, NMI, OBJECTIVE

__all__ = ["build", "mean_std", "final_metrics"]


def mean_std(mean: float | None, std: float | None, n: int) -> str:
    if mean is None:
        return "—"
    return f"{mean:.4f} ± {std:.4f}" if std is not None and n > 1 else f"{mean:.4f}"


def final_metrics(data: DashboardData) -> tuple[str, ...]:
    """The test-split metrics the final stage is summarised by: the search metric's (Recall@1 when the search
    metric is no retrieval metric), MAP@R and NMI, those that some run logged."""
    primary = data.metric if split_of(data.metric) else OBJECTIVE
    names = dict.fromkeys(as_test(data, m) for m in (primary, MAP_AT_R, NMI))
    return tuple(m for m in names if data.has_metric(m))


def _noise(r: dict) -> str:
    return f"{r[R.NOISE_KIND]} {r[R.NOISE_RATIO]:g}" if r[R.NOISE_KIND] not in ("", "none") else "none"


def _final_table(panel: Panel, data: DashboardData, finals: pl.DataFrame, metrics: tuple[str, ...]) -> None:
    """One row per final group: where it came from, and each test metric's mean ± std and 95 % interval."""
    names = varying_params(data)
    search = data.runs.select(
        "experiment",
        R.TRIAL_ID,
        "config",
        R.VALIDATION,
        *(METRIC + m for m in {data.metric, *metrics} if METRIC + m in data.runs.columns),
    )
    several = finals["experiment"].n_unique() > 1
    rows = []
    for r in finals.iter_rows(named=True):
        source = search.filter((pl.col("experiment") == r["experiment"]) & (pl.col(R.TRIAL_ID) == r[R.SOURCE_TRIAL]))
        src = source.row(0, named=True) if source.height else {}
        row = {"study": r["experiment"]} if several else {}
        row.update(
            {
                R.GROUP: r[R.GROUP] or "—",
                "source trial": r[R.SOURCE_TRIAL] or "—",
                f"{data.metric} of the source trial": decimals(src[METRIC + data.metric])
                if src.get(METRIC + data.metric) is not None
                else "—",
                "params": params_text(src["config"], names) if src else "—",
                "seeds": ", ".join(r["seeds"]),
            }
        )
        for m in metrics:
            row[f"{m} mean ± std"] = mean_std(r[f"mean_{m}"], r[f"std_{m}"], r[f"n_{m}"])
            row[f"{m} ci95 low"] = f"{r[f'lo_{m}']:.4f}" if r[f"lo_{m}"] is not None else "—"
            row[f"{m} ci95 high"] = f"{r[f'hi_{m}']:.4f}" if r[f"hi_{m}"] is not None else "—"
        if metrics:  # what the search trial itself measured on the test classes (never seen by the searcher)
            value = src.get(METRIC + metrics[0])
            kind = {"kfold": "fold ensemble", "holdout": "holdout model"}.get(
                src.get(R.VALIDATION, ""), "selected on it"
            )
            row[f"{metrics[0]} of the source trial ({kind})"] = f"{value:.4f}" if value is not None else "—"
        rows.append(row)
    panel.table(
        "final",
        "Final test stage: each group's selected configuration retrained with fresh seeds on all training "
        "classes and evaluated once on the test classes (mean ± sample std, Student's t 95 % interval)",
        pl.DataFrame(rows),
    )


def _final_cells(r: dict[str, Any], finals: pl.DataFrame, primary: str) -> dict[str, str]:
    """The leaderboard row's final-stage columns: the final groups retrained from the row's search runs (matched by
    their ``source_trial`` tag), or dashes."""
    match = finals.filter(pl.col("experiment").is_in(r["experiments"]) & pl.col(R.SOURCE_TRIAL).is_in(r["trial_ids"]))
    if not match.height:
        return {f"final {primary} mean [95 % CI]": "—", "final group": "—"}
    f = match.row(0, named=True)
    return {
        f"final {primary} mean [95 % CI]": ci_text(
            f[f"mean_{primary}"], f[f"lo_{primary}"], f[f"hi_{primary}"], f[f"n_{primary}"]
        ),
        "final group": ", ".join(match[R.GROUP].to_list()),
    }


def build(data: DashboardData) -> Panel:
    metric = data.metric
    split = {"val/": "validation classes", "test/": "test classes"}.get(split_of(metric), "")
    panel = Panel(
        "leaderboard",
        "Leaderboard",
        f"Best configuration per family × dataset × noise setting by the mean of <code>{metric}</code> "
        f"({data.mode}{', on the ' + split if split else ''}) over its seeds, last epoch of each "
        "<em>search-stage</em> run; <em>best run</em> is the group's best single search run. Failed runs are "
        "left out. Where the study ran its final stage, the <em>final</em> column gives the test mean and its "
        "95 % interval over the final seeds of the configuration (final runs matched to search runs by their "
        "<code>source_trial</code> tag), and the final table below lists every final group.",
    )
    best = best_configs(data)
    if best.is_empty():
        panel.skipped = f"no search-stage run reported {metric}"
        return panel
    metrics = final_metrics(data)
    finals = final_groups(data, metrics)
    primary = metrics[0] if metrics else None
    names = varying_params(data)
    rows = []
    for r in best.iter_rows(named=True):
        row = {
            R.FAMILY: r[R.FAMILY],
            R.DATASET: r[R.DATASET],
            "noise": _noise(r),
            R.SUBSET: r[R.SUBSET],
            f"{metric} mean ± std": mean_std(r["mean"], r["std"], r["n_runs"]),
            "runs": str(r["n_runs"]),
            "seeds": ", ".join(r["seeds"]),
            "best run": decimals(r["best_value"]),
            "best trial": r[R.BEST_TRIAL_ID],
            "params of the best configuration": params_text(r["config"], names),
        }
        if not finals.is_empty() and primary is not None:
            row.update(_final_cells(r, finals, primary))
        rows.append(row)
    panel.table("table", f"{len(rows)} groups", pl.DataFrame(rows))
    if not finals.is_empty():
        _final_table(panel, data, finals, metrics)
    runs = scored_runs(data)
    failed = data.runs.filter(pl.col("status") == "FAILED").height
    top = best.sort("best_value", descending=data.mode == "max").row(0, named=True)
    panel.note(
        f"{runs.height} scored search runs, {failed} failed. Best run overall: trial {top[R.BEST_TRIAL_ID]} "
        f"({top[R.FAMILY]}, {top[R.DATASET]}) with {metric} = {decimals(top['best_value'])}."
    )
    on_test = [s.experiment for s in data.studies if s.selection == "test"]
    if on_test:
        panel.note(
            f"{', '.join(on_test)}: hyperparameters were selected on the test classes, so the ranked "
            "numbers are optimistic."
        )
    return panel

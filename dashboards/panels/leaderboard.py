"""Leaderboard: the best configuration per family × dataset × noise setting, mean ± std over its runs (seeds)."""

from __future__ import annotations

import polars as pl

from dashboards.load import DashboardData
from dashboards.panels import Panel
from dashboards.select import best_configs, params_text, scored_runs, varying_params

__all__ = ["build", "mean_std"]


def mean_std(mean: float | None, std: float | None, n: int) -> str:
    if mean is None:
        return "—"
    return f"{mean:.4f} ± {std:.4f}" if std is not None and n > 1 else f"{mean:.4f}"


def build(data: DashboardData) -> Panel:
    metric = data.metric
    panel = Panel(
        "leaderboard", "Leaderboard",
        f"Best configuration per family × dataset × noise setting by the mean of <code>{metric}</code> "
        f"({data.mode}) over its seeds (last epoch of each run); <em>best run</em> is the group's best single "
        "run. Failed runs are left out.",
    )
    best = best_configs(data)
    if best.is_empty():
        panel.skipped = f"no run reported {metric}"
        return panel
    names = varying_params(data)
    rows = []
    for r in best.iter_rows(named=True):
        rows.append({
            "family": r["family"],
            "dataset": r["dataset"],
            "noise": f"{r['noise_kind']} {r['noise_ratio']:g}" if r["noise_kind"] not in ("", "none") else "none",
            "subset": r["subset"],
            f"{metric} mean ± std": mean_std(r["mean"], r["std"], r["n_runs"]),
            "runs": str(r["n_runs"]),
            "seeds": ", ".join(r["seeds"]),
            "best run": repr(r["best_value"]),  # exact: it must equal the run's metric in MLflow
            "best trial": r["best_trial_id"],
            "params of the best configuration": params_text(r["config"], names),
        })
    panel.table("table", f"{len(rows)} groups", pl.DataFrame(rows))
    runs = scored_runs(data)
    failed = data.runs.filter(pl.col("status") == "FAILED").height
    top = best.sort("best_value", descending=data.mode == "max").row(0, named=True)
    panel.note(
        f"{runs.height} scored runs, {failed} failed. Best run overall: trial {top['best_trial_id']} "
        f"({top['family']}, {top['dataset']}) with {metric} = {top['best_value']!r}."
    )
    return panel

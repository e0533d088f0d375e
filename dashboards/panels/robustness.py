"""Robustness to label noise: Recall@1 and NMI vs noise ratio per family (BSPML Table 2 as plot and table),
and with a topline arm (``subset = clean_only``) the noisy/topline ratio of the noise paper's Figs 1-4 (d)."""

from __future__ import annotations

import polars as pl

from dashboards.load import DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.panels.leaderboard import mean_std
from dashboards.select import best_configs
from study.metric_names import NMI, recall_at

__all__ = ["build", "robustness_table"]

_METRICS = (recall_at(1), NMI)


def _series(best: pl.DataFrame) -> pl.DataFrame:
    """Label each row with its curve (family [/ dataset] [/ noise kind]); a clean (p = 0) row joins every
    noise kind its family was run with."""
    datasets = best["dataset"].n_unique() > 1
    several_kinds = len(set(best["noise_kind"].to_list()) - {"none", ""}) > 1
    labelled = []
    for (family, dataset), part in best.group_by("family", "dataset", maintain_order=True):
        kinds = sorted(set(part["noise_kind"].to_list()) - {"none", ""}) or ["none"]
        for kind in kinds:
            label = " / ".join([family] + ([dataset] if datasets else []) + ([kind] if several_kinds else []))
            rows = part.filter(pl.col("noise_kind").is_in([kind, "none", ""]))
            labelled.append(rows.with_columns(pl.lit(label).alias("series")))
    return pl.concat(labelled)


def robustness_table(data: DashboardData) -> pl.DataFrame:
    """Per series × noise ratio: mean/std of Recall@1 and NMI of the best configuration, noisy and topline."""
    best = best_configs(data, _METRICS)
    if best.is_empty():
        return best
    return _series(best).sort("series", "subset", "noise_ratio")


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "robustness", "Robustness to label noise",
        "Recall@1 and NMI of each family's best configuration (mean ± std over seeds) against the noise ratio "
        "p. With topline runs (trained on the 1 − p clean samples only) the ratio noisy / topline separates "
        "the harm of wrong labels from the harm of having less data (noise paper, Figs 1-4 (d)).",
    )
    table = robustness_table(data)
    metrics = [m for m in _METRICS if data.has_metric(m)]
    if table.is_empty() or not metrics:
        panel.skipped = "no run reported recall_at_1 or nmi"
        return panel
    noisy = table.filter(pl.col("subset") != "clean_only")
    topline = table.filter(pl.col("subset") == "clean_only")
    fig, axes = new_figure(len(metrics))
    for ax, m in zip(axes, metrics):
        for (series,), part in noisy.group_by("series", maintain_order=True):
            part = part.sort("noise_ratio")
            ax.errorbar(part["noise_ratio"], part[f"mean_{m}"], yerr=part[f"std_{m}"].fill_null(0.0),
                        marker="o", capsize=3, label=series)
        for (series,), part in topline.group_by("series", maintain_order=True):
            part = part.sort("noise_ratio")
            ax.plot(part["noise_ratio"], part[f"mean_{m}"], "--", marker="s", alpha=0.7, label=f"{series} topline")
        ax.set_xlabel("noise ratio p")
        ax.set_ylabel(m)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    panel.figure("vs_noise", "Recall@1 and NMI vs noise ratio (best configuration per point)", fig)

    ratios = []
    if not topline.is_empty():
        joined = noisy.join(topline, on=["series", "noise_ratio"], suffix="_top")
        for m in metrics:
            joined = joined.with_columns((pl.col(f"mean_{m}") / pl.col(f"mean_{m}_top")).alias(f"ratio_{m}"))
        ratios = joined.sort("series", "noise_ratio")
        if not ratios.is_empty():
            fig, axes = new_figure(1)
            for (series,), part in ratios.group_by("series", maintain_order=True):
                for m, style in zip(metrics, ("-o", "--s")):
                    axes[0].plot(part["noise_ratio"], part[f"ratio_{m}"], style, label=f"{series} {m}")
            axes[0].axhline(1.0, color="grey", lw=0.8)
            axes[0].set_xlabel("noise ratio p")
            axes[0].set_ylabel("noisy / topline")
            axes[0].grid(alpha=0.3)
            axes[0].legend(fontsize=7)
            panel.figure("topline_ratio", "Noisy / topline ratio (1 = noise costs nothing beyond the lost data)", fig)

    rows = []
    for r in noisy.iter_rows(named=True):
        row = {"series": r["series"], "noise ratio": f"{r['noise_ratio']:g}", "runs": str(r["n_runs"]),
               "seeds": ", ".join(r["seeds"])}
        for m in metrics:
            row[m] = mean_std(r[f"mean_{m}"], r[f"std_{m}"], r["n_runs"])
        if len(ratios):
            match = ratios.filter((pl.col("series") == r["series"]) & (pl.col("noise_ratio") == r["noise_ratio"]))
            for m in metrics:
                row[f"{m} / topline"] = f"{match[f'ratio_{m}'][0]:.4f}" if match.height else "—"
        rows.append(row)
    if rows:
        panel.table("table", "Table 2 layout: best configuration per family and noise ratio", pl.DataFrame(rows))
    return panel

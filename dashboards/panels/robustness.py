"""Robustness to label noise: Recall@1 and NMI on the test classes vs noise ratio per family (BSPML Table 2 as plot
and table), and with a topline arm (``subset = clean_only``) the noisy/topline ratio of the noise paper's Figs 1-4 (d).

Each point is the final stage of its family × noise setting when the study ran one (the selected configuration
retrained with several seeds: mean and Student's t 95 % interval over the seeds); otherwise the ``test/`` metrics
of the search runs of the configuration that is best by the search metric (a ``validation.kind: none`` study, or
a study without a final stage).

Below, with a final stage, the comparison tables of ``python -m dashboards.compare`` (built by that module: paired
differences to a reference family, recovered share, IQM, probability of improvement, claimed vs honest)."""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboards.compare.render import legend, text_tables
from dashboards.compare.rows import dashboard_comparison
from dashboards.load import DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.panels.leaderboard import mean_std
from dashboards.select import GROUP, as_test, best_configs, final_runs, scored_runs, summarise
from trainables.schema import record as R
from trainables.schema.metric_names import NMI, recall_at

__all__ = ["build", "robustness_table", "robustness_metrics"]

_SOURCE = {
    "kfold": "search runs (fold ensemble)",
    "holdout": "search runs (holdout model)",
    "none": "search runs (selected on test)",
}


def robustness_metrics(data: DashboardData) -> tuple[str, ...]:
    """``test/recall_at_1`` and ``test/nmi`` (the bare names in a store older than the split prefixes), as logged."""
    return tuple(m for m in (as_test(data, recall_at(1)), as_test(data, NMI)) if data.has_metric(m))


def _series(best: pl.DataFrame) -> pl.DataFrame:
    """Label each row with its curve (family [/ dataset] [/ noise kind]); a clean (p = 0) row joins every
    noise kind its family was run with."""
    datasets = best[R.DATASET].n_unique() > 1
    several_kinds = len(set(best[R.NOISE_KIND].to_list()) - {"none", ""}) > 1
    labelled = []
    for (family, dataset), part in best.group_by(R.FAMILY, R.DATASET, maintain_order=True):
        kinds = sorted(set(part[R.NOISE_KIND].to_list()) - {"none", ""}) or ["none"]
        for kind in kinds:
            label = " / ".join([family] + ([dataset] if datasets else []) + ([kind] if several_kinds else []))
            rows = part.filter(pl.col(R.NOISE_KIND).is_in([kind, "none", ""]))
            labelled.append(rows.with_columns(pl.lit(label).alias("series")))
    return pl.concat(labelled)


def robustness_table(data: DashboardData) -> pl.DataFrame:
    """Per series × noise ratio × subset: ``source``, ``n_runs``, ``seeds`` and ``n_/mean_/std_/lo_/hi_<m>`` of
    each robustness metric: the final stage's runs where the group has them, else the search runs of the
    group's best configuration."""
    metrics = robustness_metrics(data)
    if not metrics:
        return pl.DataFrame()
    parts = []
    final = final_runs(data).filter(
        pl.any_horizontal(pl.col("m/" + m).is_not_null() for m in metrics if "m/" + m in data.runs.columns)
    )
    if not final.is_empty():
        parts.append(
            summarise(final, GROUP, metrics).with_columns(
                pl.format("final stage ({} seeds)", pl.col("n_runs")).alias("source")
            )
        )
    search = scored_runs(data)
    if parts:
        search = search.join(parts[0].select(GROUP), on=GROUP, how="anti", nulls_equal=True)
    best = best_configs(data, runs=search) if not search.is_empty() else pl.DataFrame()
    for r in best.iter_rows(named=True):
        runs = data.runs.filter(pl.col("run_id").is_in(r["run_ids"]))
        kinds = sorted(set(runs[R.VALIDATION].to_list()) - {""})
        source = _SOURCE.get(kinds[0], "search runs") if len(kinds) == 1 else "search runs"
        parts.append(summarise(runs, GROUP, metrics).with_columns(pl.lit(source).alias("source")))
    if not parts:
        return pl.DataFrame()
    table = pl.concat(parts, how="diagonal_relaxed")
    return _series(table).sort("series", R.SUBSET, R.NOISE_RATIO)


def _topline_ratios(panel: Panel, noisy: pl.DataFrame, topline: pl.DataFrame, metrics: list[str]) -> pl.DataFrame:
    """Noisy / topline per series and noise ratio (``ratio_<metric>`` columns; empty without topline runs), drawn."""
    if topline.is_empty():
        return pl.DataFrame()
    joined = noisy.join(topline, on=["series", R.NOISE_RATIO], suffix="_top")
    for m in metrics:
        joined = joined.with_columns((pl.col(f"mean_{m}") / pl.col(f"mean_{m}_top")).alias(f"ratio_{m}"))
    ratios = joined.sort("series", R.NOISE_RATIO)
    if not ratios.is_empty():
        fig, axes = new_figure(1)
        for (series,), part in ratios.group_by("series", maintain_order=True):
            for m, style in zip(metrics, ("-o", "--s")):
                axes[0].plot(part[R.NOISE_RATIO], part[f"ratio_{m}"], style, label=f"{series} {m}")
        axes[0].axhline(1.0, color="grey", lw=0.8)
        axes[0].set_xlabel("noise ratio p")
        axes[0].set_ylabel("noisy / topline")
        axes[0].grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        panel.figure("topline_ratio", "Noisy / topline ratio (1 = noise costs nothing beyond the lost data)", fig)
    return ratios


def _table_row(r: dict[str, Any], metrics: list[str], ratios: pl.DataFrame) -> dict[str, str]:
    """One row of the Table 2 layout: a series at a noise ratio, each metric's mean ± std and interval, and its
    ratio to the topline where there is one."""
    row = {
        "series": r["series"],
        "noise ratio": f"{r[R.NOISE_RATIO]:g}",
        "source": r["source"],
        "runs": str(r["n_runs"]),
        "seeds": ", ".join(r["seeds"]),
    }
    for m in metrics:
        row[m] = mean_std(r[f"mean_{m}"], r[f"std_{m}"], r[f"n_{m}"])
        lo, hi = r[f"lo_{m}"], r[f"hi_{m}"]
        row[f"{m} 95 % CI"] = f"[{lo:.4f}, {hi:.4f}]" if lo is not None and hi is not None else "—"
    if len(ratios):
        match = ratios.filter((pl.col("series") == r["series"]) & (pl.col(R.NOISE_RATIO) == r[R.NOISE_RATIO]))
        for m in metrics:
            row[f"{m} / topline"] = f"{match[f'ratio_{m}'][0]:.4f}" if match.height else "—"
    return row


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "robustness",
        "Robustness to label noise",
        "Recall@1 and NMI on the test classes against the noise ratio p. A point is the final test stage of "
        "its family and noise setting where the study ran one (the configuration selected by the search "
        "metric, retrained with several seeds: mean, error bar = Student's t 95 % interval over the seeds), "
        "else the test metrics of the search runs of the best configuration (error bar = 95 % interval over "
        "its seeds); the <em>source</em> column says which. With topline runs (trained on the 1 − p clean samples only) the ratio noisy / topline separates "
        "the harm of wrong labels from the harm of having less data (noise paper, Figs 1-4 (d)).",
    )
    table = robustness_table(data)
    metrics = list(robustness_metrics(data))
    if table.is_empty() or not metrics:
        panel.skipped = "no run reported test/recall_at_1 or test/nmi"
        return panel
    noisy = table.filter(pl.col(R.SUBSET) != "clean_only")
    topline = table.filter(pl.col(R.SUBSET) == "clean_only")
    fig, axes = new_figure(len(metrics))
    for ax, m in zip(axes, metrics):
        for (series,), part in noisy.group_by("series", maintain_order=True):
            part = part.sort(R.NOISE_RATIO)
            half = (part[f"hi_{m}"] - part[f"mean_{m}"]).fill_null(0.0)
            ax.errorbar(part[R.NOISE_RATIO], part[f"mean_{m}"], yerr=half, marker="o", capsize=3, label=series)
        for (series,), part in topline.group_by("series", maintain_order=True):
            part = part.sort(R.NOISE_RATIO)
            ax.plot(part[R.NOISE_RATIO], part[f"mean_{m}"], "--", marker="s", alpha=0.7, label=f"{series} topline")
        ax.set_xlabel("noise ratio p")
        ax.set_ylabel(m)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    panel.figure(
        "vs_noise",
        "Test Recall@1 and NMI vs noise ratio (final stage, else best configuration; error bars: 95 % interval)",
        fig,
    )

    ratios = _topline_ratios(panel, noisy, topline, metrics)

    rows = [_table_row(r, metrics, ratios) for r in noisy.iter_rows(named=True)]
    if rows:
        panel.table(
            "table",
            "Table 2 layout: test metrics per family and noise ratio (final stage where it ran)",
            pl.DataFrame(rows),
        )
    _comparison_tables(panel, data, metrics[0])
    return panel


def _comparison_tables(panel: Panel, data: DashboardData, metric: str) -> None:
    """The tables of ``python -m dashboards.compare`` (same code, same numbers) for the final stage's cells."""
    comparison = dashboard_comparison(data, metric)
    if comparison is None:
        return
    for i, (caption, header, body) in enumerate(text_tables(comparison)):
        panel.table(f"compare_{i}", caption, pl.DataFrame(body, schema=header, orient="row"))
    panel.note(legend(comparison) + "".join(f" Note: {n}." for n in comparison.notes))

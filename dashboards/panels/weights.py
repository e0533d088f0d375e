"""Self-paced sample weights (BSPML): MAW and SDAW (Eq. 14) against λ and μ as heatmaps (Figs 3-4), per-epoch
weight quantiles, per-class average weight trajectories (parquet artifact) and ``noise_auroc`` over epochs."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from dashboards.load import METRIC, PARAM, DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import best_configs, decimals, fmt, search_runs
from trainables.schema import record as R
from trainables.schema.metric_names import (
    EXCLUDED_SHARE,
    LAMBDA,
    MAW,
    NOISE_AUROC,
    NOISE_PRECISION,
    NOISE_RECALL,
    SDAW,
    W_Q10,
    W_Q50,
    W_Q90,
)

__all__ = ["build", "lambda_mu_table", "bin_labels"]

_MAX_RUNS = 6
_MAX_LEVELS = 6
_BINS = 5


def bin_labels(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Heatmap levels: each distinct value when there are few (a grid search), else quantile bins."""
    distinct = np.unique(values)
    if len(distinct) <= _MAX_LEVELS:
        return [fmt(float(v), 3) for v in distinct], np.searchsorted(distinct, values)
    edges = np.unique(np.quantile(values, np.linspace(0, 1, _BINS + 1)))
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    return [f"{fmt(float(a), 3)}–{fmt(float(b), 3)}" for a, b in zip(edges[:-1], edges[1:])], index


def _lambda_mu(data: DashboardData) -> pl.DataFrame:
    """Search runs with MAW/SDAW and their λ (the age reached: last ``lambda``, else ``lambda_max``) and μ."""
    runs = search_runs(data).filter(pl.col("status") != "FAILED")
    if not (data.has_metric(MAW) and data.has_metric(SDAW)):
        return pl.DataFrame()
    lam = pl.col(METRIC + LAMBDA) if METRIC + LAMBDA in runs.columns else pl.lit(None, pl.Float64)
    if PARAM + "params.lambda_max" in runs.columns:
        lam = lam.fill_null(pl.col(PARAM + "params.lambda_max").cast(pl.Float64, strict=False))
    mu = (
        pl.col(PARAM + "params.mu").cast(pl.Float64, strict=False)
        if PARAM + "params.mu" in runs.columns
        else pl.lit(None, pl.Float64)
    )
    # SPMS is BSPML without the balance term: μ = 0 by definition (BSPML §5 ablation).
    mu = pl.when(pl.col(R.FAMILY) == "spms").then(pl.lit(0.0)).otherwise(mu)
    return runs.select(
        "run_id",
        lam.alias("lambda"),
        mu.alias("mu"),
        pl.col(METRIC + MAW).alias("maw"),
        pl.col(METRIC + SDAW).alias("sdaw"),
    ).drop_nulls()


def lambda_mu_table(data: DashboardData) -> pl.DataFrame:
    """Mean final MAW and SDAW per (λ level, μ level) with the number of runs in each cell."""
    frame = _lambda_mu(data)
    if frame.is_empty():
        return frame
    lam_labels, lam_index = bin_labels(frame["lambda"].to_numpy())
    mu_labels, mu_index = bin_labels(frame["mu"].to_numpy())
    frame = frame.with_columns(pl.Series("li", lam_index), pl.Series("mi", mu_index))
    cells = frame.group_by("li", "mi").agg(pl.col("maw").mean(), pl.col("sdaw").mean(), pl.len().alias("runs"))
    return cells.with_columns(
        pl.col("li").map_elements(lambda i: lam_labels[i], return_dtype=pl.Utf8).alias("lambda"),
        pl.col("mi").map_elements(lambda i: mu_labels[i], return_dtype=pl.Utf8).alias("mu"),
    ).sort("li", "mi")


def _heatmaps(panel: Panel, cells: pl.DataFrame) -> None:
    lam = cells.select("li", "lambda").unique().sort("li")
    mu = cells.select("mi", "mu").unique().sort("mi")
    fig, axes = new_figure(2, width=4.0 + 0.3 * mu.height, height=3.0 + 0.2 * lam.height)
    for ax, (key, title) in zip(axes, ((MAW, "MAW (Fig. 3)"), (SDAW, "SDAW (Fig. 4)"))):
        grid = np.full((lam.height, mu.height), np.nan)
        for r in cells.iter_rows(named=True):
            grid[lam["li"].to_list().index(r["li"]), mu["mi"].to_list().index(r["mi"])] = r[key]
        image = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if v == v:
                ax.text(
                    j, i, f"{v:.3f}", ha="center", va="center", fontsize=7, color="w" if v < np.nanmean(grid) else "k"
                )
        ax.set_xticks(range(mu.height), mu["mu"].to_list(), fontsize=7, rotation=30)
        ax.set_yticks(range(lam.height), lam["lambda"].to_list(), fontsize=7)
        ax.set_xlabel("μ (balance weight)")
        ax.set_ylabel("λ (age reached)")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    panel.figure("maw_sdaw", "Final MAW and SDAW (Eq. 14) against λ and μ, mean over runs per cell", fig)
    panel.table(
        "maw_sdaw",
        "MAW / SDAW per cell",
        cells.select(
            "lambda",
            "mu",
            pl.col("maw").map_elements(decimals, return_dtype=pl.Utf8),
            pl.col("sdaw").map_elements(decimals, return_dtype=pl.Utf8),
            pl.col("runs").cast(pl.Utf8),
        ),
    )


def _best_runs(data: DashboardData, needs: str) -> list[tuple[str, str]]:
    """``(run_id, label)`` of each group's best run that logged ``needs`` per epoch (at most a few)."""
    best = best_configs(data)
    if best.is_empty():
        return []
    have = set(data.history.filter(pl.col("key") == needs)["run_id"].to_list())
    out = []
    for r in best.iter_rows(named=True):
        if r["best_run_id"] in have:
            noise = f"{r[R.NOISE_KIND]} {r[R.NOISE_RATIO]:g}" if r[R.NOISE_KIND] not in ("", "none") else "clean"
            top = " topline" if r[R.SUBSET] == "clean_only" else ""
            out.append((r["best_run_id"], f"{r[R.FAMILY]} {r[R.DATASET]} {noise}{top} ({r[R.BEST_TRIAL_ID]})"))
    return out[:_MAX_RUNS]


def _runs_with(data: DashboardData, table: pl.DataFrame) -> list[tuple[str, str]]:
    """``(run_id, label)`` of the runs in an artifact ``table``: the groups' best runs first, then the others."""
    have = set(table["run_id"].to_list())
    best = dict(_best_runs(data, MAW) + _best_runs(data, W_Q50))
    trials = dict(data.runs.select("run_id", R.TRIAL_ID).iter_rows())
    runs = [(r, label) for r, label in best.items() if r in have]
    runs += [(r, f"trial {trials.get(r, r[:8])}") for r in sorted(have - set(best))]
    return runs[:_MAX_RUNS]


def _quantiles(panel: Panel, data: DashboardData) -> None:
    runs = _best_runs(data, W_Q50)
    if not runs:
        return
    fig, axes = new_figure(len(runs), width=3.4, height=2.8)
    for ax, (run_id, label) in zip(axes, runs):
        q = {k: data.history_of([run_id], k) for k in (W_Q10, W_Q50, W_Q90, EXCLUDED_SHARE)}
        if q[W_Q10].height and q[W_Q90].height:
            ax.fill_between(q[W_Q10]["step"], q[W_Q10]["value"], q[W_Q90]["value"], alpha=0.3, label="w q10–q90")
        ax.plot(q[W_Q50]["step"], q[W_Q50]["value"], "-o", ms=3, label="w median")
        if q[EXCLUDED_SHARE].height:
            ax.plot(q[EXCLUDED_SHARE]["step"], q[EXCLUDED_SHARE]["value"], "--", color="C3", label="excluded share")
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_title(label, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    panel.figure("quantiles", "Sample-weight quantiles per epoch (best run of each group)", fig)


def _run_grid(data: DashboardData, table: pl.DataFrame) -> tuple[Any, list[tuple[Any, str, pl.DataFrame]]]:
    """One axis per run of an artifact ``table``: ``(figure, [(axis, label, that run's rows), ...])``."""
    runs = _runs_with(data, table)
    fig, axes = new_figure(len(runs), width=3.4, height=2.8)
    return fig, [(ax, label, table.filter(pl.col("run_id") == run_id)) for ax, (run_id, label) in zip(axes, runs)]


def _class_trajectories(panel: Panel, data: DashboardData) -> None:
    if data.class_weights.is_empty():
        return
    fig, grid = _run_grid(data, data.class_weights)
    for ax, label, table in grid:
        for (cls,), part in table.sort("class", "epoch").group_by("class", maintain_order=True):
            ax.plot(part["epoch"], part["avg_weight"], lw=1, label=str(cls))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="epoch", ylabel="class average weight")
        ax.set_title(label, fontsize=8)
        ax.grid(alpha=0.3)
        if table["class"].n_unique() <= 10:
            ax.legend(fontsize=6, title="class", title_fontsize=6)
    panel.figure("class_weights", "Per-class average weight per epoch (parquet artifact)", fig)


def _histograms(panel: Panel, data: DashboardData) -> None:
    if data.sample_weights.is_empty():
        return
    fig, grid = _run_grid(data, data.sample_weights)
    bins = np.linspace(0, 1, 21)
    for ax, label, table in grid:
        for noisy, colour, name in ((False, "C0", "clean"), (True, "C3", "noisy")):
            w = table.filter(pl.col("noisy") == noisy)["weight"].to_numpy()
            if len(w):
                ax.hist(w, bins=bins, alpha=0.6, color=colour, label=f"{name} ({len(w)})")
        ax.set(xlabel="final sample weight w", ylabel="samples")
        ax.set_title(label, fontsize=8)
        ax.legend(fontsize=6)
    panel.figure("histogram", "Final sample weights of clean and (recorded) noisy samples", fig)


def _auroc(panel: Panel, data: DashboardData) -> None:
    runs = _best_runs(data, NOISE_AUROC)
    if not runs:
        return
    has_pr = data.has_metric(NOISE_PRECISION) or data.has_metric(NOISE_RECALL)
    fig, axes = new_figure(2 if has_pr else 1)
    for i, (run_id, label) in enumerate(runs):
        h = data.history_of([run_id], NOISE_AUROC)
        axes[0].plot(h["step"], h["value"], "-o", ms=3, color=f"C{i}", label=label)
        if has_pr:
            for key, style in ((NOISE_PRECISION, "-"), (NOISE_RECALL, "--")):
                h = data.history_of([run_id], key)
                axes[1].plot(h["step"], h["value"], style, color=f"C{i}", label=f"{key.split('_')[1]} {label}")
    axes[0].axhline(0.5, color="grey", lw=0.8)
    axes[0].set_ylabel("noise AUROC of 1 − w")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    if has_pr:
        axes[1].set_ylabel("precision / recall of w < 0.5")
    panel.figure("noise_auroc", "How well low weights find the noisy samples (0.5 = chance)", fig)


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "weights",
        "Self-paced sample weights",
        "BSPML's weights: final MAW / SDAW (Eq. 14) against λ and μ (Figs 3-4: a larger λ admits more "
        "samples, a larger μ balances the classes), weight quantiles per epoch, each class's average weight, "
        "the final weights of clean and noisy samples, and how well low weights flag the recorded noisy samples.",
    )
    cells = lambda_mu_table(data)
    if not cells.is_empty():
        _heatmaps(panel, cells)
    _quantiles(panel, data)
    _class_trajectories(panel, data)
    _histograms(panel, data)
    _auroc(panel, data)
    if not panel.drawn:
        panel.skipped = "no run logged sample weights (maw, sdaw, w_q50, noise_auroc or a class-weight parquet)"
    return panel

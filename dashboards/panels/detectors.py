"""Which detector finds the noise: the label-free detectors the loop scores every ``diagnostics.every`` epochs
(``noise/xi_auroc``: BSPML's per-sample loss ξ, ``noise/centroid_auroc``: PRISM's class-centre softmax,
``noise/knn_auroc``: a kNN label vote) beside the family's own selection score (``noise_auroc``: BSPML's weights,
PRISM's clean probability, knn_rejection's vote), per family × noise setting and epoch.

A family whose own AUROC stays far below a detector's on the same embeddings has the signal and does not use it."""

from __future__ import annotations

import polars as pl
from matplotlib.ticker import MaxNLocator

from dashboards.load import DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import decimals, search_runs
from trainables.schema import record as R
from trainables.schema.metric_names import NOISE_AUROC, NOISE_DETECTORS, noise_detector_ap, noise_detector_auroc

__all__ = ["build", "detector_history", "detector_table"]

_INTRO = (
    "Each detector scores every training sample from the embeddings and the noisy labels alone; the loop, which "
    "holds the recorded noise, reports its AUROC (0.5 = chance) and average precision. <b>own</b> is the family's "
    "own per-sample score (<code>noise_auroc</code>: BSPML's weights, PRISM's clean probability). Mean over the "
    "search-stage runs of each family and noise setting."
)
_MAX_GROUPS = 6
#: The column of a family × noise setting ("ms per_class 0.2"), which the panel's curves and rows are of (not the
#: final stage's group tag).
_SETTING = "setting"
_OWN = "own"


def _columns() -> dict[str, str]:
    """Metric name → short label, detectors first, then the family's own score."""
    return {**{noise_detector_auroc(d): d for d in NOISE_DETECTORS}, NOISE_AUROC: _OWN}


def _groups(data: DashboardData) -> pl.DataFrame:
    runs = search_runs(data).filter(pl.col("status") != "FAILED")
    label = pl.concat_str(
        [pl.col(R.FAMILY), pl.col(R.NOISE_KIND), pl.col(R.NOISE_RATIO).cast(pl.Utf8)], separator=" "
    ).alias(_SETTING)
    return runs.select("run_id", label)


def detector_history(data: DashboardData) -> pl.DataFrame:
    """``setting, epoch, detector, auroc, runs``: per family × noise setting, epoch and detector, the mean AUROC over
    the runs that logged it; empty when no run logged a detector."""
    names = _columns()
    detectors = list(names)[:-1]
    if "key" not in data.history.columns or not data.history["key"].is_in(detectors).any():
        return pl.DataFrame()
    rows = data.history.filter(pl.col("key").is_in(list(names))).join(_groups(data), on="run_id")
    return (
        rows.group_by(_SETTING, "step", "key")
        .agg(pl.col("value").mean().alias("auroc"), pl.col("run_id").n_unique().alias("runs"))
        .with_columns(pl.col("key").replace_strict(names).alias("detector"))
        .rename({"step": "epoch"})
        .select(_SETTING, "epoch", "detector", "auroc", "runs")
        .sort(_SETTING, "detector", "epoch")
    )


def detector_table(data: DashboardData) -> pl.DataFrame:
    """Per family × noise setting, each detector's mean AUROC and AP at the last epoch it was scored (and the family's own AUROC)."""
    history = detector_history(data)
    if history.is_empty():
        return history
    keys = [noise_detector_auroc(d) for d in NOISE_DETECTORS] + [noise_detector_ap(d) for d in NOISE_DETECTORS]
    last = (
        data.history.filter(pl.col("key").is_in([*keys, NOISE_AUROC]))
        .sort("step")
        .group_by("run_id", "key")
        .agg(pl.col("value").last())
        .join(_groups(data), on="run_id")
    )
    wide = last.group_by(_SETTING, "key").agg(pl.col("value").mean()).pivot("key", index=_SETTING, values="value")
    runs = last.group_by(_SETTING).agg(pl.col("run_id").n_unique().alias("runs"))
    return wide.join(runs, on=_SETTING).sort(_SETTING)


def _curves(panel: Panel, history: pl.DataFrame) -> None:
    groups = history[_SETTING].unique(maintain_order=True).to_list()[:_MAX_GROUPS]
    fig, axes = new_figure(len(groups), width=3.6, height=2.9)
    colours = {name: f"C{i}" for i, name in enumerate((*NOISE_DETECTORS, _OWN))}
    for ax, group in zip(axes, groups):
        for (detector,), part in history.filter(pl.col(_SETTING) == group).group_by("detector", maintain_order=True):
            style = "--" if detector == _OWN else "-o"
            ax.plot(part["epoch"], part["auroc"], style, color=colours[str(detector)], label=str(detector), ms=3)
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.set_title(group, fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("noise AUROC")
        ax.set_ylim(0.0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    panel.figure("auroc", "Noise AUROC per epoch of each detector and of the family's own score (dashed)", fig)


def build(data: DashboardData) -> Panel:
    panel = Panel("detectors", "Which detector finds the noise", _INTRO)
    history = detector_history(data)
    if history.is_empty():
        panel.skipped = "no run logged noise/<detector>_auroc (clean labels, or diagnostics.every: 0)"
        return panel
    _curves(panel, history)
    table = detector_table(data)
    shown = [
        (c, label)
        for d in NOISE_DETECTORS
        for c, label in ((noise_detector_auroc(d), f"{d} AUROC"), (noise_detector_ap(d), f"{d} AP"))
    ] + [(NOISE_AUROC, "own AUROC")]
    panel.table(
        "table",
        "Last scored epoch, mean over runs",
        table.select(
            pl.col(_SETTING).alias("family / noise"),
            pl.col("runs").cast(pl.Utf8),
            *(
                (pl.col(c) if c in table.columns else pl.lit(None, pl.Float64))
                .map_elements(decimals, return_dtype=pl.Utf8, skip_nulls=False)
                .alias(label)
                for c, label in shown
            ),
        ),
    )
    return panel

"""Paired two-modality data (the debiased-contrastive thesis §4.1, ``flows2d``): the recovered 2-D distribution.

For each configuration group (the final stage's groups, else the search runs' ``params.loss``/family), one run's
held-out test pairs: z (the latent they were made from), and each modality's raw embedding, every point coloured
by z's angle (hue) and radius (brightness), so a good embedding shows z's colour wheel again in both panels. Beside
it, Table 1's metrics (``paired_mae``, ``paired_cosine``) as mean and 95 % interval over the final seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dashboards.load import METRIC, PARAM, DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import ci_text, final_runs, search_runs
from trainables.schema import record as R
from trainables.schema.metric_names import PAIRED_COSINE, PAIRED_MAE, TEST_PREFIX, bounds_of

__all__ = ["build", "latent_colours"]

_MAX_ROWS = 6
_METRICS = (TEST_PREFIX + PAIRED_MAE, TEST_PREFIX + PAIRED_COSINE)


def latent_colours(z: np.ndarray) -> np.ndarray:
    """RGB per 2-D latent point: hue = its angle, value = its radius (dark near the origin)."""
    from matplotlib.colors import hsv_to_rgb

    hue = (np.arctan2(z[:, 1], z[:, 0]) / (2 * np.pi)) % 1.0
    radius = np.linalg.norm(z, axis=1)
    value = 0.35 + 0.65 * np.clip(radius / np.quantile(radius, 0.95), 0.0, 1.0)
    return hsv_to_rgb(np.stack([hue, np.full_like(hue, 0.9), value], axis=1))


def _label_column(runs: pl.DataFrame) -> pl.Expr:
    loss = PARAM + "params.loss"
    if loss in runs.columns:
        return pl.col(loss).fill_null(pl.col(R.FAMILY))
    return pl.col(R.FAMILY)


def _groups(data: DashboardData) -> list[tuple[str, list[str]]]:
    """``(label, run ids)`` per group of runs that logged the paired artifact: final groups when there are any."""
    runs = final_runs(data)
    if runs.is_empty():
        runs = search_runs(data).filter(pl.col("status") != "FAILED")
    runs = runs.filter(pl.col("run_id").is_in(list(data.paired)))
    if runs.is_empty():
        return []
    runs = runs.with_columns(_label_column(runs).alias("label")).sort("label", R.SEED)
    return [(str(key[0]), part["run_id"].to_list()) for key, part in runs.group_by("label", maintain_order=True)]


def _scatter(ax: Any, points: np.ndarray, colours: np.ndarray, title: str) -> None:
    ax.scatter(points[:, 0], points[:, 1], c=colours, s=3, linewidths=0)
    ax.set_title(title, fontsize=8)
    ax.set_aspect("equal", adjustable="datalim")
    ax.tick_params(labelsize=6)


def _metrics_table(data: DashboardData, groups: list[tuple[str, list[str]]]) -> pl.DataFrame:
    rows = []
    for label, run_ids in groups:
        runs = data.runs.filter(pl.col("run_id").is_in(run_ids))
        row = {"loss": label, "runs": str(runs.height)}
        for metric in _METRICS:
            column = METRIC + metric
            values = [v for v in (runs[column].to_list() if column in runs.columns else []) if v is not None]
            if not values:
                row[metric] = "—"
                continue
            from study.final.intervals import t_interval

            mean, _, low, high = t_interval(values, bounds_of(metric))
            row[metric] = ci_text(mean, None if low != low else low, None if high != high else high, len(values))
        rows.append(row)
    return pl.DataFrame(rows)


def build(data: DashboardData) -> Panel:
    panel = Panel(
        key="paired",
        title="Paired modalities: the recovered 2-D distribution",
        intro=(
            "Held-out test pairs of the thesis' 2-D experiment (§4.1): the latent z ~ N(0, I) they were made from, and "
            "each modality's raw (unnormalised) embedding. Colour = z's angle (hue) and radius (brightness): an "
            "embedding that recovers z repeats its colour wheel, in both modalities alike. One run (the lowest seed) "
            "per group; the table has Table 1's metrics over all of the group's runs."
        ),
    )
    groups = _groups(data)
    if not groups:
        panel.skipped = "no run logged a paired test artifact (only paired datasets such as flows2d do)"
        return panel
    shown = groups[:_MAX_ROWS]
    fig, axes = new_figure(3, len(shown), width=3.0, height=2.8)
    for row, (label, run_ids) in enumerate(shown):
        arrays = data.paired[run_ids[0]]
        if "latent" not in arrays or arrays["view0"].shape[1] != 2:
            continue
        colours = latent_colours(arrays["latent"])
        ax_z, ax_a, ax_b = axes[3 * row : 3 * row + 3]
        _scatter(ax_z, arrays["latent"], colours, "z ~ N(0, I)")
        _scatter(ax_a, arrays["view0"], colours, f"{label}: modality 1 (moons) embedding")
        _scatter(ax_b, arrays["view1"], colours, f"{label}: modality 2 (5 blobs) embedding")
    panel.figure("recovered", "Recovered 2-D distribution per loss, coloured by z", fig)
    panel.table(
        "metrics",
        "Paired MAE (mean ||x − y||) and cosine on the test pairs, mean [95 % CI]",
        _metrics_table(data, groups),
    )
    return panel

"""Pair-noise theory (noise paper): expected pair-noise rates ``q_pos``/``q_neg`` (Eq. 7-8) against the rates
observed in the batches, the share of corrupted negatives the miner picked, the estimated η and the noise
bound of Eq. 27, ``p < 1 − sqrt(1 − 1/η)``, per mining rule."""

from __future__ import annotations

import polars as pl

from dashboards.load import METRIC, PARAM, DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import as_test, decimals, fmt, search_runs
from trainables.schema import record as R
from trainables.schema.metric_names import (
    ETA_HAT,
    MINER_CORRUPT_NEG_SHARE,
    NOISE_DIAGNOSTICS,
    P_BOUND_TRIPLET,
    Q_NEG,
    Q_NEG_OBS,
    Q_POS,
    Q_POS_OBS,
    recall_at,
)

__all__ = ["build", "theory_table"]

_INTRO = (
    "Per mining rule (family / <code>params.mining</code>), mean last-epoch values over runs: expected "
    "pair-noise rates (Eq. 7-8) against what the batches held, the share of corrupted negatives the "
    "miner selected, η̂ and the tolerance bound p &lt; 1 − √(1 − 1/η) (Eq. 27), with the runs' test Recall@1 "
    "(for a k-fold search run, its fold ensemble's). Search-stage runs only: the final stage's retrains of one "
    "configuration would weigh it twice."
)
_THEORY = NOISE_DIAGNOSTICS


def _max(column: pl.Series) -> float:
    """The largest value of a numeric column, 0 when it has none (polars types ``max()`` as any scalar)."""
    top = column.max()
    return float(top) if isinstance(top, (int, float)) else 0.0


def theory_table(data: DashboardData) -> pl.DataFrame:
    """Mean last-epoch values per mining rule × noise ratio over the search runs that logged them."""
    recall = as_test(data, recall_at(1))
    present = [m for m in (*_THEORY, recall) if data.has_metric(m)]
    if not any(m in present for m in (Q_POS, Q_NEG, ETA_HAT, P_BOUND_TRIPLET)):
        return pl.DataFrame()
    runs = search_runs(data).filter(pl.col("status") != "FAILED")
    rule = pl.col(R.FAMILY)
    if PARAM + "params.mining" in runs.columns:
        rule = (
            pl.when(pl.col(PARAM + "params.mining").is_not_null())
            .then(pl.concat_str([pl.col(R.FAMILY), pl.col(PARAM + "params.mining")], separator=" / "))
            .otherwise(pl.col(R.FAMILY))
        )
    runs = runs.with_columns(rule.alias("rule")).filter(
        pl.any_horizontal(pl.col(METRIC + m).is_not_null() for m in present if m != recall)
    )
    return (
        runs.group_by("rule", R.NOISE_RATIO)
        .agg(pl.len().alias("runs"), *(pl.col(METRIC + m).mean().alias(m) for m in present))
        .sort("rule", R.NOISE_RATIO)
    )


def _scatter(panel: Panel, table: pl.DataFrame) -> None:
    pairs = [(e, o) for e, o in ((Q_POS, Q_POS_OBS), (Q_NEG, Q_NEG_OBS)) if e in table.columns and o in table.columns]
    if not pairs:
        return
    fig, axes = new_figure(len(pairs))
    for ax, (expected, observed) in zip(axes, pairs):
        for i, ((rule,), part) in enumerate(table.group_by("rule", maintain_order=True)):
            ax.scatter(part[expected], part[observed], color=f"C{i}", label=rule)
            for x, y, p in zip(part[expected], part[observed], part[R.NOISE_RATIO]):
                ax.annotate(f"p={p:g}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        top = max(_max(table[expected]), _max(table[observed])) * 1.1 or 1.0
        ax.plot([0, top], [0, top], color="grey", lw=0.8)
        ax.set_xlabel(f"{expected} (Eq. {7 if expected == Q_POS else 8})")
        ax.set_ylabel(observed)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    panel.figure("q_rates", "Expected vs observed pair-noise rates (diagonal = theory holds)", fig)


def _vs_noise(panel: Panel, table: pl.DataFrame) -> None:
    plots = []
    if MINER_CORRUPT_NEG_SHARE in table.columns:
        plots.append("miner")
    if ETA_HAT in table.columns:
        plots.append("eta")
    if P_BOUND_TRIPLET in table.columns:
        plots.append("bound")
    if not plots:
        return
    fig, axes = new_figure(len(plots))
    for ax, kind in zip(axes, plots):
        for i, ((rule,), part) in enumerate(table.group_by("rule", maintain_order=True)):
            p = part[R.NOISE_RATIO]
            if kind == "miner":
                ax.plot(p, part[MINER_CORRUPT_NEG_SHARE], "-o", color=f"C{i}", label=f"{rule} mined")
                if Q_NEG in part.columns:
                    ax.plot(p, part[Q_NEG], ":", color=f"C{i}", label=f"{rule} {Q_NEG}")
                ax.set_ylabel("share of corrupted negatives")
            elif kind == "eta":
                ax.plot(p, part[ETA_HAT], "-o", color=f"C{i}", label=rule)
                ax.set_ylabel("η̂ (hard-negative over-sampling)")
            else:
                ax.plot(p, part[P_BOUND_TRIPLET], "-o", color=f"C{i}", label=rule)
                ax.set_ylabel("noise bound of Eq. 27")
        if kind == "bound":
            top = max(_max(table[R.NOISE_RATIO]), _max(table[P_BOUND_TRIPLET]))
            ax.plot([0, top], [0, top], color="grey", lw=0.8, label="p = bound")
        ax.set_xlabel("noise ratio p")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    panel.figure(
        "vs_noise", "Miner's corrupted-negative share, η̂ and the bound vs noise ratio (bound > p: tolerated)", fig
    )


def build(data: DashboardData) -> Panel:
    panel = Panel("noise_theory", "Noise theory", _INTRO)
    table = theory_table(data)
    if table.is_empty():
        panel.skipped = "no run logged q_pos, q_neg, eta_hat or p_bound_triplet"
        return panel
    _scatter(panel, table)
    _vs_noise(panel, table)
    panel.table(
        "table",
        "Noise-theory quantities per mining rule and noise ratio",
        table.select(
            "rule",
            pl.col(R.NOISE_RATIO).map_elements(fmt, return_dtype=pl.Utf8).alias("noise ratio"),
            pl.col("runs").cast(pl.Utf8),
            *(
                pl.col(c).map_elements(decimals, return_dtype=pl.Utf8)
                for c in table.columns
                if c not in ("rule", R.NOISE_RATIO, "runs")
            ),
        ),
    )
    return panel

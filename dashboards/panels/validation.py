"""Validation vs test: how well the metric the search selected on predicts the test metric.

A scatter of the search trials that logged both ``val/<m>`` and ``test/<m>`` (last values: a k-fold trial's
``test/`` is its fold ensemble at the last epoch, a holdout trial's its single model), with Spearman's rank
correlation (``scipy.stats.spearmanr``): near 1, ranking configurations on the validation classes ranks them as
the test classes would.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from dashboards.load import METRIC, DashboardData
from dashboards.panels import Panel, new_figure
from dashboards.select import base_name, final_runs, search_runs, split_of
from trainables.schema import record as R
from trainables.schema.metric_names import MAP_AT_R, NMI, OBJECTIVE, TEST_PREFIX, VAL_PREFIX

__all__ = ["build", "pairs", "MIN_TRIALS"]

#: Fewer trials with both values than this: no scatter (a rank correlation of two points says nothing).
MIN_TRIALS = 3


def pairs(data: DashboardData, base: str) -> pl.DataFrame:
    """Search trials (not failed) with finite last ``val/<base>`` and ``test/<base>``: ``run_id``,
    ``trial_id``, ``experiment``, ``family``, ``noise_ratio``, ``subset``, ``val``, ``test``."""
    val, test = METRIC + VAL_PREFIX + base, METRIC + TEST_PREFIX + base
    runs = search_runs(data)
    if val not in runs.columns or test not in runs.columns:
        return pl.DataFrame()
    return (
        runs.filter((pl.col("status") != "FAILED") & pl.col(val).is_finite() & pl.col(test).is_finite())
        .select(
            "run_id",
            R.TRIAL_ID,
            "experiment",
            R.FAMILY,
            R.NOISE_RATIO,
            R.SUBSET,
            pl.col(val).alias("val"),
            pl.col(test).alias("test"),
        )
        .sort("experiment", R.TRIAL_ID)
    )


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from scipy.stats import spearmanr

    result = spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def _number(value: float, digits: str) -> str:
    return "nan (a constant side)" if math.isnan(value) else format(value, digits)


def _scatter(panel: Panel, found: pl.DataFrame, base: str, sources: set[str]) -> tuple[float, float]:
    """Draw ``base``'s validation-vs-test scatter of the search trials ``found`` (one colour per family and noise
    setting; trials the final stage retrained, ``sources``, ringed); return Spearman's ρ and its p-value."""
    x, y = found["val"].to_numpy(), found["test"].to_numpy()
    rho, p = _spearman(x, y)
    fig, axes = new_figure(1, width=4.6, height=3.8)
    ax = axes[0]
    labels = [
        f"{f} p={r:g}" + (" topline" if s == "clean_only" else "")
        for f, r, s in zip(found[R.FAMILY], found[R.NOISE_RATIO], found[R.SUBSET])
    ]
    for i, label in enumerate(dict.fromkeys(labels)):
        mask = np.array([lab == label for lab in labels])
        ax.scatter(x[mask], y[mask], s=22, alpha=0.8, color=f"C{i % 10}", label=label)
    ringed = np.array([t in sources for t in found[R.TRIAL_ID]])
    if ringed.any():
        ax.scatter(x[ringed], y[ringed], s=90, facecolors="none", edgecolors="k", label="retrained in the final stage")
    ax.set_xlabel(VAL_PREFIX + base)
    ax.set_ylabel(TEST_PREFIX + base)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    caption = (
        f"{VAL_PREFIX}{base} vs {TEST_PREFIX}{base} over {found.height} search trials: Spearman ρ = "
        f"{_number(rho, '.4f')} (p = {_number(p, '.3g')})"
    )
    ax.set_title(f"Spearman ρ = {_number(rho, '.3f')}", fontsize=9)
    panel.figure(f"scatter_{base}", caption, fig)
    return rho, p


def _reliability_table(panel: Panel, data: DashboardData) -> None:
    """How reliable each cell's choice is (the parent runs' ``selection/<cell>/…`` metrics, study.final.reliability):
    P(best) beside 1/n, the tie set, the rank stability over the last two epochs."""
    rows = [
        {
            "study": s.experiment,
            "cell": cell,
            "candidates": f"{m.get('candidates', math.nan):.0f}",
            "P(best)": f"{m.get('p_best', math.nan):.2f}",
            "1/n": f"{m.get('chance', math.nan):.2f}",
            "tie set": f"{m.get('tie_set', math.nan):.0f}",
            "stability ρ": "" if "stability" not in m else f"{m['stability']:.2f}",
        }
        for s in data.studies
        for cell, m in sorted(s.reliability.items())
    ]
    if rows:
        panel.table(
            "reliability",
            "How reliable each cell's choice is on its validation classes (resampled 1000 times, every candidate on "
            "the same resample; the test classes are never read): P(best) beside 1/n for n candidates, the tie set "
            "(the candidates the bootstrap cannot tell from the winner), and the rank correlation of the candidates' "
            "scores at the last two epochs",
            pl.DataFrame(rows),
        )


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "validation",
        "Validation vs test",
        "How well validation predicts test: each search trial's last <code>val/</code> value (validation "
        "classes carved from the training classes, what the searcher saw) against its <code>test/</code> value "
        "(the unseen test classes; a k-fold trial's fold ensemble, reported once at its last epoch), with "
        "Spearman's rank correlation ρ. Trials whose configuration the final stage retrained are ringed.",
    )
    primary = base_name(data.metric) if split_of(data.metric) else OBJECTIVE
    sources = set(final_runs(data)[R.SOURCE_TRIAL].to_list()) - {""}
    rows = []
    counts = {}
    for base in dict.fromkeys((primary, MAP_AT_R, NMI)):
        found = pairs(data, base)
        counts[base] = found.height
        if found.height < MIN_TRIALS:
            continue
        rho, p = _scatter(panel, found, base, sources)
        rows.append(
            {
                "metric": base,
                "search trials": str(found.height),
                "Spearman rho": _number(rho, ".4f"),
                "p-value": _number(p, ".3g"),
            }
        )
    _reliability_table(panel, data)
    if not rows:
        why = (
            f"fewer than {MIN_TRIALS} search trials have both {VAL_PREFIX}{primary} and "
            f"{TEST_PREFIX}{primary} ({counts[primary]}); a study with validation.kind: none has no "
            f"{VAL_PREFIX} metrics"
        )
        if panel.blocks:  # the reliability table stands alone: say why the scatter does not
            panel.note(f"No rank correlation of validation and test: {why}.")
        else:
            panel.skipped = why
        return panel
    panel.table(
        "spearman", "Spearman rank correlation of validation and test, over the search trials", pl.DataFrame(rows)
    )
    return panel

"""The statistics of the comparison tables, in one place: t-interval, paired difference, Welch, Holm, the bootstrap
of the recovered share, IQM (Agarwal et al., NeurIPS 2021), and what a comparison's verdict is made of (written in
:mod:`dashboards.verdict_stats`, named here too): the difference over replicates × seeds with its variance parts, the
p-value that matches their interval, the minimum detectable effect, and the probability of improvement P(A > B) with
its interval.

Why hand-written: the aggregates are a few lines each (Agarwal et al., "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", Sec. 4 and App. A), and ``rliable`` would add a dependency (and JAX-era pins) for them;
the paired and Welch intervals are scipy's t quantiles around textbook formulas written out so that the tests can
check each against an independent scipy call. The Student's t interval of one cell is the final stage's own
(:func:`study.final.intervals.t_interval`), used here, not restated; the paired difference is that interval of the
per-seed differences.

Why these intervals: the final stage runs every cell with the same seeds 0 … n−1 (and, with ``final.reseed_noise``,
the same noise draw per seed), so two cells' values pair by seed and their difference's t-interval is much narrower
than two overlapping per-cell intervals suggest; without common seeds there is nothing to pair and the difference
falls back to Welch's unequal-variance interval. Over ``search.replicates`` the difference's interval is the crossed
one of :mod:`study.final.intervals` (each side's searches add their own variance). A verdict's interval is a sum of
*parts* (a variance of the mean and its degrees of freedom, each at its own t quantile): :func:`delta_parts`,
:func:`half_width`, and :func:`p_value` / :func:`min_detectable_effect` at other levels of the same parts. The
recovered share is a ratio of differences, which has no t-interval; its interval is a percentile bootstrap over seeds
(with 3 seeds only 10 distinct resamples exist, so it is a rough guide, not a calibrated 95 %).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dashboards.verdict_stats import (
    ALPHA,
    POWER,
    Improvement,
    ReplicatedDifference,
    Values,
    delta_parts,
    half_width,
    improvement_interval,
    min_detectable_effect,
    p_value,
    probability_of_improvement,
    replicated_difference,
    welch_parts,
)
from study.final.intervals import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, Part, t_interval

__all__ = [
    "Difference",
    "paired_difference",
    "welch_difference",
    "difference",
    "holm",
    "recovered_share",
    "iqm",
    "stratified_bootstrap_ci",
    "ALPHA",
    "POWER",
    "Part",
    "ReplicatedDifference",
    "replicated_difference",
    "delta_parts",
    "welch_parts",
    "half_width",
    "p_value",
    "min_detectable_effect",
    "Improvement",
    "improvement_interval",
    "probability_of_improvement",
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
]


@dataclass(frozen=True)
class Difference:
    """``x − y`` with its 95 % interval and two-sided p-value; ``paired`` says which test made them."""

    delta: float
    low: float
    high: float
    p_value: float
    #: Pairs (paired) or the smaller group size (Welch).
    n: int
    paired: bool


def _nan_difference(delta: float, n: int, paired: bool) -> Difference:
    return Difference(delta, math.nan, math.nan, math.nan, n, paired)


def paired_difference(x: Sequence[float], y: Sequence[float]) -> Difference:
    """Mean of ``x_i − y_i`` with Student's t 95 % interval and the paired t-test's p-value (n − 1 degrees of
    freedom); the interval is NaN for fewer than 2 pairs, and for identical pairs it is the point itself."""
    from scipy import stats

    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    n = d.size
    mean, std, low, high = t_interval(d.tolist())
    if n < 2:
        return _nan_difference(mean, n, True)
    se = std / math.sqrt(n)
    if se == 0.0:
        return Difference(mean, mean, mean, 1.0 if mean == 0.0 else 0.0, n, True)
    p = 2.0 * float(stats.t.sf(abs(mean) / se, df=n - 1))
    return Difference(mean, low, high, p, n, True)


def welch_difference(x: Sequence[float], y: Sequence[float]) -> Difference:
    """``mean(x) − mean(y)`` with Welch's 95 % interval (unequal variances, Welch–Satterthwaite degrees of freedom)
    and Welch's t-test p-value; NaN interval when either group has fewer than 2 values."""
    from scipy import stats

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    delta = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return _nan_difference(delta, min(a.size, b.size), False)
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Difference(delta, delta, delta, 1.0 if delta == 0.0 else 0.0, min(a.size, b.size), False)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    t = float(stats.t.ppf(0.975, df=df))
    p = 2.0 * float(stats.t.sf(abs(delta) / se, df=df))
    return Difference(delta, delta - t * se, delta + t * se, p, min(a.size, b.size), False)


def difference(x: Values, y: Values) -> Difference:
    """``x − y`` paired over the seeds both have (at least 2), else Welch over all values of each."""
    common = sorted(set(x) & set(y))
    if len(common) >= 2:
        return paired_difference([x[s] for s in common], [y[s] for s in common])
    return welch_difference(list(x.values()), list(y.values()))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): sorted ascending, p_(i) · (m − i + 1), made monotone and
    capped at 1; reject at level α where the adjusted value is < α. NaN p-values pass through and do not count in m."""
    adjusted = [math.nan] * len(p_values)
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m, running = len(order), 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def _share(fam_p: np.ndarray, ref_p: np.ndarray, ref_0: np.ndarray) -> np.ndarray:
    """(fam_p − ref_p) / (ref_0 − ref_p) of (resampled) means; NaN where the reference did not drop at all."""
    drop = ref_0 - ref_p
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(drop != 0.0, (fam_p - ref_p) / drop, np.nan)


def recovered_share(
    fam_p: Values,
    ref_p: Values,
    ref_0: Values,
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float, float, bool]:
    """``(share, ci95_low, ci95_high, paired)``: the share of the reference's noise drop a family wins back,
    (fam_p − ref_p) / (ref_0 − ref_p) of the cells' means, with a percentile bootstrap 95 % interval.

    Paired resampling when the three cells share at least 2 seeds: one draw of seeds (with replacement) picks the
    same seeds in all three cells, so a seed's common noise draw and initialisation stay together. Otherwise each
    cell's values are resampled on their own. Resamples whose reference drop is 0 are left out of the percentiles.
    """
    point = float(
        _share(
            np.array(np.mean(list(fam_p.values()))),
            np.array(np.mean(list(ref_p.values()))),
            np.array(np.mean(list(ref_0.values()))),
        )
    )
    rng = np.random.default_rng(seed)
    common = sorted(set(fam_p) & set(ref_p) & set(ref_0))
    paired = len(common) >= 2
    if paired:
        cells = [np.array([c[s] for s in common]) for c in (fam_p, ref_p, ref_0)]
        index = rng.integers(0, len(common), size=(samples, len(common)))
        means = [c[index].mean(axis=1) for c in cells]
    else:
        cells = [np.array(list(c.values()), dtype=float) for c in (fam_p, ref_p, ref_0)]
        means = [c[rng.integers(0, c.size, size=(samples, c.size))].mean(axis=1) for c in cells]
    shares = _share(*means)
    shares = shares[np.isfinite(shares)]
    if shares.size == 0:
        return point, math.nan, math.nan, paired
    low, high = np.percentile(shares, [2.5, 97.5])
    return point, float(low), float(high), paired


def iqm(scores: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean (Agarwal et al. 2021, Sec. 4.1): the mean of the middle 50 % of all runs' scores, pooled
    over tasks, after cutting ⌊0.25 · N⌋ values from each end of the sorted N scores (as ``scipy.stats.trim_mean``
    with 0.25, which rliable calls)."""
    x = np.sort(np.asarray(scores, dtype=float).ravel())
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def stratified_bootstrap_ci(
    statistic: Callable[..., float],
    *groups: Sequence[Sequence[float]],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile 95 % interval of ``statistic(*groups)`` under the stratified bootstrap of Agarwal et al. (Sec. 4,
    App. A.1): each group's runs are resampled with replacement *within each task*, tasks are never mixed.
    ``groups`` are one or more per-task lists of run scores (the IQM of a family: its cells' runs)."""
    rng = np.random.default_rng(seed)
    arrays = [[np.asarray(task, dtype=float) for task in g] for g in groups]
    values = np.empty(samples)
    for b in range(samples):
        resampled = [[t[rng.integers(0, t.size, size=t.size)] for t in g] for g in arrays]
        values[b] = statistic(*resampled)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)

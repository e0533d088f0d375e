"""The statistics of the comparison tables, in one place: t-interval, paired difference, Welch, Holm, the bootstrap
of the recovered share, IQM (Agarwal et al., NeurIPS 2021), and what a comparison's verdict is made of: the
difference over replicates × seeds with its variance parts, the p-value that matches their interval, the minimum
detectable effect, and the probability of improvement P(A > B) with its interval.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from study.final.intervals import (
    BOOTSTRAP_SAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    MIN_SEEDS,
    Part,
    left_out_replicates,
    replicated_delta,
    t_interval,
)
from study.final.intervals import delta_parts as crossed_parts  # a verdict's p-value and MDE are of that interval

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


#: Per-seed values of one cell: final seed → metric value.
Values = Mapping[int, float]


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


# ---------------------------------------------------------------------------------------------------- verdicts

#: The level every verdict is tested at (two-sided, family-wise over a table's comparisons by :func:`holm`), and the
#: power the minimum detectable effect is for.
ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class ReplicatedDifference:
    """``x − y`` over replicates × seeds (:func:`replicated_difference`) with its 95 % interval and the variance parts
    it is made of: what a comparison's verdict, p-value and minimum detectable effect are computed from."""

    #: Mean over the arm's replicates and the common seeds, less the reference's.
    delta: float
    #: The crossed replicates × seeds 95 % interval (:func:`study.final.intervals.replicated_delta`).
    low: float
    high: float
    #: The final seeds every pooled replicate of both sides has.
    seeds: int
    #: The seeds' part and each side's replicate part (:func:`delta_parts`).
    parts: tuple[Part, ...]

    @property
    def significant(self) -> bool:
        """Whether the (unadjusted) 95 % interval excludes 0."""
        return self.low > 0.0 or self.high < 0.0


def _kept(replicates: Sequence[Values]) -> list[Values]:
    out = set(left_out_replicates(replicates))
    return [v for i, v in enumerate(replicates) if i not in out]


def _layouts(x: Sequence[Values], y: Sequence[Values]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each side's (replicates, common seeds) values over the replicates pooling keeps (2 or more values each);
    ``None`` when a side keeps none or fewer than 2 seeds are common to all kept."""
    a, b = _kept(x), _kept(y)
    if not a or not b:
        return None
    seeds = sorted(set.intersection(*(set(v) for v in (*a, *b))))
    if len(seeds) < MIN_SEEDS:
        return None
    return (np.array([[v[s] for s in seeds] for v in a]), np.array([[v[s] for s in seeds] for v in b]))


def delta_parts(a: np.ndarray, b: np.ndarray) -> tuple[Part, ...]:
    """The variance parts of ``mean(a) − mean(b)`` for two (replicates, seeds) layouts on the same seeds, as
    :func:`study.final.intervals.crossed_delta` sums them: the paired per-seed differences' part, then each side's
    replicate part (merged when both sides have 3 or more replicates; none for a side of one replicate)."""
    return tuple(crossed_parts(a, b)[1])


def welch_parts(x: Sequence[float], y: Sequence[float]) -> tuple[Part, ...]:
    """Welch's one part for two unpaired groups: the two means' variances summed, at Welch–Satterthwaite's degrees
    of freedom (none when a group has fewer than 2 values, or both are constant)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2 or b.size < 2:
        return ()
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    den = va**2 / (a.size - 1) + vb**2 / (b.size - 1)
    df = (va + vb) ** 2 / den if den > 0 else float(min(a.size, b.size) - 1)
    return (Part(np.asarray(va + vb), df),)


def half_width(parts: Sequence[Part], confidence: float = CONFIDENCE) -> float:
    """``√(Σ t²_{(1+c)/2, dfᵢ} · vᵢ)``: the two-sided ``confidence`` half-width of the parts, each at its own t
    quantile (at 0.95, the half-width of :func:`study.final.intervals.crossed_delta`); NaN without parts."""
    from scipy import stats

    if not parts:
        return math.nan
    dfs, variances = _arrays(parts)
    return math.sqrt(float(np.sum(stats.t.ppf(0.5 + confidence / 2, dfs) ** 2 * variances)))


def _arrays(parts: Sequence[Part]) -> tuple[np.ndarray, np.ndarray]:
    """The parts' degrees of freedom and variances, as arrays (one scipy call for all parts)."""
    return np.array([float(p.df) for p in parts]), np.array([float(p.variance) for p in parts])


def p_value(delta: float, parts: Sequence[Part]) -> float:
    """The two-sided p-value of ``delta`` against 0 that matches the parts' interval: the smallest α whose 1 − α
    interval (:func:`half_width`) excludes 0. With one part it is Student's t-test's (the paired test at R = 1,
    Welch's for unpaired groups); with more, the half-width at 1 − α is solved for ``|delta|``. NaN without parts."""
    from scipy import optimize, stats

    if not parts or not math.isfinite(delta):
        return math.nan
    variance = sum(float(p.variance) for p in parts)
    if variance == 0.0:
        return 1.0 if delta == 0.0 else 0.0
    if len(parts) == 1:
        return float(2.0 * stats.t.sf(abs(delta) / math.sqrt(variance), float(parts[0].df)))

    dfs, variances = _arrays(parts)

    def excess(alpha: float) -> float:
        return math.sqrt(float(np.sum(stats.t.isf(alpha / 2, dfs) ** 2 * variances))) - abs(delta)

    if excess(_P_FLOOR) <= 0.0:
        return _P_FLOOR
    return float(optimize.brentq(excess, _P_FLOOR, 1.0, xtol=1e-15, rtol=1e-12))


#: The smallest p-value :func:`p_value` solves for (a verdict needs far less).
_P_FLOOR = 1e-12


def min_detectable_effect(parts: Sequence[Part], alpha: float = ALPHA, power: float = POWER) -> float:
    """The effect the design detects with ``power`` at two-sided level ``alpha``, its variance as estimated:
    ``√(Σ (t_{1−α/2, dfᵢ} + t_{power, dfᵢ})² · vᵢ)``, per part at its own degrees of freedom as :func:`half_width`
    (with one part the textbook (t_{1−α/2,df} + t_{0.8,df}) · SE: 2.8 SE at large df, 5.2 SE at 2 df). NaN without
    parts."""
    from scipy import stats

    if not parts:
        return math.nan
    dfs, variances = _arrays(parts)
    return math.sqrt(float(np.sum((stats.t.ppf(1 - alpha / 2, dfs) + stats.t.ppf(power, dfs)) ** 2 * variances)))


def replicated_difference(x: Sequence[Values], y: Sequence[Values]) -> ReplicatedDifference | None:
    """``x − y`` where ``x`` and ``y`` are each a list of replicates (independent searches of one arm × condition,
    each winner retrained on the same final seeds: seed → value); ``None`` when a side has no replicate with 2 or more
    values or fewer than 2 seeds are common to the replicates kept.

    The interval is :func:`study.final.intervals.replicated_delta`'s: the seeds pair the sides, each side's
    replicates (its own independent searches; Bouthillier et al. 2021, "Accounting for Variance in Machine Learning
    Benchmarks", MLSys: the choice of hyperparameters is a source of variance that a benchmark must randomise, not
    fix) add their variance over that side's own R, never pooled with the other side's, and each part is taken at its
    own Student's t quantile (the two replicate parts as one, at Satterthwaite's degrees of freedom halfway down to
    the smaller side's, when both sides have 3 or more replicates). With one replicate a side it is the paired
    t-interval of :func:`paired_difference`, exactly. A replicate with fewer than 2 values is left out of its side
    (:func:`study.final.intervals.left_out_line` says which); the replicates are never paired with each other by
    position, so a side that lost one pairs nothing wrongly.
    """
    crossed = replicated_delta(x, y)
    layouts = _layouts(x, y)
    if crossed is None or layouts is None:
        return None
    return ReplicatedDifference(crossed.value, crossed.low, crossed.high, crossed.seeds, delta_parts(*layouts))


@dataclass(frozen=True)
class Improvement:
    """P(A > B), the probability of improvement (:func:`probability_of_improvement`), with its 95 % interval."""

    value: float
    low: float
    high: float
    #: The seeds it is over, and the (A replicate, B replicate) pairs each seed averages.
    seeds: int
    pairs: int


def improvement_interval(per_seed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(share, low, high)`` over the last axis of ``per_seed``, each seed's share of wins in [0, 1] (leading axes:
    independent draws): the mean share and the Clopper–Pearson 95 % interval of ``Σ shares`` wins in ``n`` trials
    (the beta quantiles take a fractional count). Exact for one replicate a side, where each seed is one Bernoulli
    trial given the searched winners; a seed's share over several replicate pairs varies less than a Bernoulli of its
    mean, and the interval is then conservative."""
    from scipy import stats

    x = np.asarray(per_seed, dtype=float)
    n = x.shape[-1]
    wins = x.sum(axis=-1)
    tail = (1.0 - CONFIDENCE) / 2
    with np.errstate(invalid="ignore"):
        low = np.where(wins > 0, stats.beta.ppf(tail, np.maximum(wins, 1e-300), n - wins + 1), 0.0)
        high = np.where(wins < n, stats.beta.ppf(1 - tail, wins + 1, np.maximum(n - wins, 1e-300)), 1.0)
    return wins / n, low, high


def probability_of_improvement(x: Sequence[Values], y: Sequence[Values]) -> Improvement | None:
    """P(A > B) of arm ``x`` over reference ``y``, each a list of replicates (seed → value), over the seeds common to
    the replicates kept (those with 2 or more values, as :func:`replicated_difference`'s); ``None`` with fewer than 2.

    What it estimates: the probability that A's final run beats B's final run *on the same seed* (ties ½; the same
    seed draws the same noisy labels and initialisation for both, so the comparison is paired, as Δ's), averaged over
    every (A replicate, B replicate) pair the table ran: with one replicate a side, the share of seeds A's searched
    winner beats B's; with R, that share averaged over the R_A × R_B pairs of searched winners. The seeds are the
    random draws, the searches that were run are given: the search's own variance is in Δ's interval (the verdict),
    not in this one. Its interval: :func:`improvement_interval` over the seeds' shares. After Agarwal et al. (NeurIPS
    2021, Sec. 4.3), who average the Mann–Whitney share over all (A run, B run) pairs; here the runs pair by seed."""
    layouts = _layouts(x, y)
    if layouts is None:
        return None
    a, b = layouts[0][:, None, :], layouts[1][None, :, :]
    wins = (a > b) + 0.5 * (a == b)  # (R_A, R_B, seeds)
    value, low, high = (float(v) for v in improvement_interval(wins.mean(axis=(0, 1))))
    return Improvement(value, low, high, wins.shape[-1], wins.shape[0] * wins.shape[1])

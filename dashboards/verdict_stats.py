"""What a comparison's verdict is made of (:mod:`dashboards.stats` is the face): the difference over replicates × seeds
with its variance *parts* (each a variance of the mean and its degrees of freedom, at its own t quantile), the
half-width, the p-value and the minimum detectable effect at other levels of the same parts, and the probability of
improvement P(A > B) with its interval. Why hand-written and why these intervals: :mod:`dashboards.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from study.final.intervals import CONFIDENCE, MIN_SEEDS, Part, left_out_replicates, replicated_delta
from study.final.intervals import delta_parts as crossed_parts  # a verdict's p-value and MDE are of that interval

__all__ = [
    "ALPHA",
    "POWER",
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
]

#: Per-seed values of one cell: final seed → metric value.
Values = Mapping[int, float]


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

"""The one 95 % confidence interval of a mean over seeds: Student's t (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n), and its extension
to ``search.replicates``.

With 3–10 seeds a bootstrap interval is too narrow (it cannot extrapolate beyond the observed spread); the
t-interval is the textbook choice. The final stage's summary (:data:`trainables.schema.record.FINAL_SUMMARY_FILE`, the parent
run's metrics), the dashboards' tables and the comparison's paired differences all use this function.

Over ``search.replicates`` (R independent searches, each winner retrained on the same n seeds) a value is a crossed
R × n layout: a replicate's effect (its search's winner) and a seed's (its noisy labels and initialisation, shared by
every replicate and arm) add up. The grand mean's variance is σ²_replicate/R + σ²_seed/n + σ²_residual/(Rn), estimated
by the variance of the replicates' means over R plus that of the seeds' means over n (each holds the residual's share
once: the estimate errs wide by σ²_residual/(Rn)). Its interval (:func:`crossed_interval`) takes Student's t with the
**smaller** of the two parts' degrees of freedom (R − 1, n − 1), not Satterthwaite's: with R = 2 the replicate part
has one degree of freedom, and Satterthwaite's estimate of it covered 89 % of a simulated null where this covers
≥ 95 % at every R ∈ {1, 2, 3, 5} and n ∈ {3, 5, 7} (tests/study/final/test_intervals_coverage.py; the two-level
percentile bootstrap this replaces covered 70 % at R = 2 × 5 seeds, issue 59). Wide at R = 2, as two searches
warrant. With one replicate it is the t-interval over seeds, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "t_interval",
    "few_seeds_warning",
    "CONFIDENCE",
    "crossed_interval",
    "replicated_delta",
    "replicated_mean",
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
]

#: The coverage of every interval the study reports.
CONFIDENCE = 0.95
#: Bootstrap resamples and the generator's seed (the comparison's recovered share and aggregates): reproducible tables.
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0


def t_interval(values: Sequence[float], bounds: tuple[float, float] | None = None) -> tuple[float, float, float, float]:
    """``(mean, std, ci95_low, ci95_high)`` of ``values`` (sample std; the interval is NaN for one value, and the
    point itself when all values are equal). ``bounds``: the metric's range
    (:func:`trainables.schema.metric_names.bounds_of`), which the interval is cut to: the true mean lies in it, so the
    cut loses no coverage, and over 2 or 3 seeds near 1 the interval would otherwise claim a Recall@1 above 1."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    low, high = _within(mean - half, mean + half, bounds)
    return mean, std, low, high


def few_seeds_warning(seeds: int) -> str | None:
    """The warning for ``final.seeds`` 1 or 2 (0 skips the final stage): one seed gives no interval, and two give one
    degree of freedom, t₀.₉₇₅ 12.7 against 4.3 at three seeds, an interval too wide to say anything."""
    if seeds == 1:
        return "warning: final.seeds is 1: the final stage reports no interval (one seed has no spread); use 3 or more"
    if seeds == 2:
        return (
            "warning: final.seeds is 2: a 95 % interval over 2 seeds has 1 degree of freedom (t = 12.7, against 4.3 "
            "over 3 seeds) and says next to nothing; use 3 or more"
        )
    return None


def _within(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    if bounds is None:
        return low, high
    return max(low, bounds[0]), min(high, bounds[1])


def crossed_interval(center: float, parts: Sequence[tuple[float, int]]) -> tuple[float, float]:
    """``center ± t₀.₉₇₅ · √(Σ variance)`` over ``parts`` (variance of the mean, degrees of freedom), t taken with the
    smallest degrees of freedom of the parts that have any variance (a part estimated at exactly 0, identical
    replicates, adds nothing); NaN without degrees of freedom, the point itself at zero variance."""
    from scipy import stats

    parts = [(v, df) for v, df in parts if df > 0]
    if not parts:
        return math.nan, math.nan
    parts = [(v, df) for v, df in parts if v > 0] or parts
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=min(df for _, df in parts))) * math.sqrt(sum(v for v, _ in parts))
    return center - half, center + half


def _common(replicates: Sequence[Mapping[int, float]]) -> list[int]:
    return sorted(set.intersection(*(set(v) for v in replicates))) if replicates else []


def _layout(replicates: Sequence[Mapping[int, float]], seeds: list[int]) -> np.ndarray:
    """``(replicates, seeds)`` values: each replicate's value for each common seed, in seed order."""
    return np.array([[v[s] for s in seeds] for v in replicates], dtype=float)


def _replicate_part(*layouts: np.ndarray) -> tuple[float, int]:
    """The replicate part of a grand mean's (or a difference of grand means') variance: the replicates' means' variance
    pooled over the layouts (each arm's searches vary alike), times Σ 1/R; its degrees of freedom Σ (R − 1)."""
    df = sum(len(a) - 1 for a in layouts)
    if df == 0:
        return 0.0, 0
    pooled = sum(float(((m := a.mean(axis=1)) - m.mean()) @ (m - m.mean())) for a in layouts) / df
    return pooled * sum(1.0 / len(a) for a in layouts), df


def replicated_mean(
    replicates: Sequence[Mapping[int, float]], bounds: tuple[float, float] | None = None
) -> tuple[float, float, float, int] | None:
    """``(mean, ci95_low, ci95_high, seeds)`` of a value over replicates × the seeds common to all (each replicate:
    seed → value): the crossed interval of the module docstring, cut to ``bounds`` (as :func:`t_interval`); ``None``
    with fewer than 2 common seeds."""
    seeds = _common(replicates)
    if len(seeds) < 2:
        return None
    a = _layout(replicates, seeds)
    seed_part = (float(a.mean(axis=0).var(ddof=1)) / len(seeds), len(seeds) - 1)
    low, high = _within(*crossed_interval(float(a.mean()), [seed_part, _replicate_part(a)]), bounds)
    return float(a.mean()), low, high, len(seeds)


def replicated_delta(
    x: Sequence[Mapping[int, float]], y: Sequence[Mapping[int, float]]
) -> tuple[float, float, float, int] | None:
    """``(delta, ci95_low, ci95_high, seeds)`` of ``x − y``, each a list of replicates (seed → value) over the seeds
    common to all: the seeds pair the two sides (a seed's shared effect cancels), so the seed part is the paired
    differences' variance over n; the replicate part is the replicates' means' variance, pooled over both sides (each
    side's replicates are its own independent searches: none pairs with the other side's). With one replicate a side
    it is the paired t-interval over the seeds, exactly. ``None`` with fewer than 2 common seeds."""
    seeds = _common([*x, *y])
    if len(seeds) < 2:
        return None
    a, b = _layout(x, seeds), _layout(y, seeds)
    paired = a.mean(axis=0) - b.mean(axis=0)
    delta = float(paired.mean())
    seed_part = (float(paired.var(ddof=1)) / len(seeds), len(seeds) - 1)
    low, high = crossed_interval(delta, [seed_part, _replicate_part(a, b)])
    return delta, low, high, len(seeds)

"""The one 95 % confidence interval of a mean over seeds: Student's t (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n), and its extension
to ``search.replicates``.

With 3–10 seeds a bootstrap interval is too narrow (it cannot extrapolate beyond the observed spread); the
t-interval is the textbook choice. The final stage's summary (:data:`trainables.schema.record.FINAL_SUMMARY_FILE`, the parent
run's metrics), the dashboards' tables and the comparison's paired differences all use this function.

Over ``search.replicates`` (R independent searches, each winner retrained on the same n seeds) a value is a crossed
R × n layout: a replicate's effect (its search's winner) and a seed's (its noisy labels and initialisation, shared by
every replicate and arm) add up. The variance of a grand mean is the sum of *parts*, each a variance of the mean
with its own degrees of freedom: the seeds' (the seeds' means' variance over n, n − 1 df) and each arm's replicates'
(its replicates' means' variance over its own R, R − 1 df; each part holds the residual's share once, so the sum errs
wide by σ²_residual/(Rn)). The half-width is Banerjee's (1961): √(Σ t²₀.₉₇₅,dfᵢ · vᵢ), each part at its own t
quantile, which for independent normal parts covers at least 95 % whatever the ratio of their true variances. For a difference (:func:`crossed_delta`)
the seeds pair the arms, so the seed part is the paired differences' and the shared seed effect cancels; the two
arms' replicate parts are each arm's own, never pooled: two arms' searches need not vary alike (a loss searched over
4 hyperparameters spreads more than one searched over 2). When both arms have 3 or more replicates, their two parts
are one part at Satterthwaite's degrees of freedom taken halfway down to the smaller arm's; with 2 replicates (1 df)
each part keeps its own t. With one replicate an arm adds no part, and the interval is about its searched winner;
with one replicate a side it is the paired t-interval over the seeds, exactly.

Chosen by simulation (tests/study/final/test_intervals_coverage.py, which prints the whole table when run as a
script: a replicate's effect with each arm's own search sd, a seed effect sd 0.01 shared by all, noise sd 0.005, 5–7
seeds, 2,000 nulls per case; the other columns from the same model at 4,000). Coverage of the 95 % promised:

    =====================  ===============  ==============  =============  ======  ===========
    replicates A vs B      search sd A / B  pooled (before)  Satterthwaite  min df  chosen
    =====================  ===============  ==============  =============  ======  ===========
    2 vs 5                 0.03 / 0         0.63–0.67       0.90           0.98    0.956–0.958
    2 vs 3                 0.03 / 0         0.78–0.79       0.90           0.98    0.951–0.963
    2 vs 3                 0.02 / 0.005     0.86–0.88       0.90           1.00    0.972–0.982
    2 vs 5                 0.02 / 0.005     0.75–0.80       0.88–0.89      1.00    0.959–0.968
    3 vs 3                 0.03 / 0         0.89–0.91       0.93–0.94      0.96    0.946–0.958
    3 vs 3                 0.02 / 0.02      0.94–0.95       0.96           0.99    0.975–0.980
    2 vs 5, a failed seed  0.03 / 0         0.67            –              –       0.954
    =====================  ===============  ==============  =============  ======  ===========

Mean width at R 3 vs 3 with equal search sd (0.02 or 0.01), against the pooled interval: Satterthwaite 1.14, t at the
smallest part's df 1.55, Banerjee's sum over all three parts 1.54, the chosen 1.27–1.29 (1.09–1.15 at search sd 0);
at most 1.5 is asked. Pooling the arms' replicate variance (what this module did before) assumes equal search
variances; Satterthwaite's degrees of freedom undercover when the arm that varies has 2 replicates (1 df: its
variance estimate is often small, and then the df comes out large); the smallest df covers but is too wide at R ≥ 3.
The chosen construction's lowest coverage in the test's table is 0.938 (R 3 vs 5, search sd 0.02 / 0.005, 7 seeds;
0.949 over 6,000 draws), and it stayed ≥ 0.94 at R 3 vs 10 and 2 vs 10 too. A failed seed (a value missing from one
replicate) leaves the seeds common to all. A replicate with fewer than 2 values (its final runs missing) is left out
of the pooling (:func:`left_out_replicates`), and :func:`left_out_line` says so in one line.

The mean over replicates (:func:`replicated_mean`) takes the same per-part sum over its seed and replicate parts. At
t of the smaller part's df (before) it covered 0.96–1.00 where it pools replicates; now 0.955–0.996 at 0.35–1.0 of
that width (0.35 at R = 2 with identical searches, where t at 1 df no longer widens the seeds' part too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "t_interval",
    "few_seeds_warning",
    "CONFIDENCE",
    "Interval",
    "Part",
    "ReplicatedInterval",
    "crossed_interval",
    "crossed_mean",
    "crossed_delta",
    "delta_parts",
    "replicated_delta",
    "replicated_mean",
    "left_out_replicates",
    "left_out_line",
    "MIN_SEEDS",
    "SHRINK",
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
]

#: The coverage of every interval the study reports.
CONFIDENCE = 0.95
#: Bootstrap resamples and the generator's seed (the comparison's recovered share and aggregates): reproducible tables.
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0
#: A replicate with fewer final values than this is left out of the pooling: it has no spread over seeds.
MIN_SEEDS = 2
#: How far two arms' merged replicate part goes from the smaller arm's degrees of freedom towards Satterthwaite's.
SHRINK = 0.5


class Interval(NamedTuple):
    """A mean over seeds with its sample std and Student's t 95 % interval (:func:`t_interval`)."""

    mean: float
    std: float
    low: float
    high: float


class ReplicatedInterval(NamedTuple):
    """A mean (or a difference of means) over replicates × seeds with its 95 % interval, and the number of seeds
    common to the replicates pooled (:func:`replicated_mean`, :func:`replicated_delta`)."""

    value: float
    low: float
    high: float
    seeds: int


class Part(NamedTuple):
    """One share of a grand mean's variance: the variance of the mean it adds, and its degrees of freedom (arrays
    over leading simulation axes, or 0-d)."""

    variance: np.ndarray
    df: np.ndarray | float


def t_interval(values: Sequence[float], bounds: tuple[float, float] | None = None) -> Interval:
    """``(mean, std, ci95_low, ci95_high)`` of ``values`` (sample std; the interval is NaN for one value, and the
    point itself when all values are equal). ``bounds``: the metric's range
    (:func:`trainables.schema.metric_names.bounds_of`), which the interval is cut to: the true mean lies in it, so the
    cut loses no coverage, and over 2 or 3 seeds near 1 the interval would otherwise claim a Recall@1 above 1."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    low, high = _within(mean - half, mean + half, bounds)
    return Interval(mean, std, low, high)


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


def _half_width(parts: Sequence[Part]) -> np.ndarray:
    """``√(Σ t²₀.₉₇₅,df · variance)`` over ``parts``: each part at its own t quantile (Banerjee 1961), so a part
    estimated at exactly 0 (identical replicates) adds nothing."""
    from scipy import stats

    q = 0.5 + CONFIDENCE / 2
    return np.sqrt(sum((np.asarray(stats.t.ppf(q, p.df)) ** 2 * p.variance for p in parts), np.zeros(())))


def crossed_interval(center: float, parts: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``center ± √(Σ t²₀.₉₇₅,dfᵢ · vᵢ)`` over ``parts`` (variance of the mean, degrees of freedom), each at its own
    t quantile; parts without degrees of freedom add nothing, and with none left the interval is NaN."""
    kept = [Part(np.asarray(v, dtype=float), float(df)) for v, df in parts if df > 0]
    if not kept:
        return math.nan, math.nan
    half = float(_half_width(kept))
    return center - half, center + half


def _seed_part(per_seed: np.ndarray) -> Part:
    """The seeds' share: the (…, n) per-seed values' variance over n, n − 1 degrees of freedom."""
    n = per_seed.shape[-1]
    return Part(per_seed.var(axis=-1, ddof=1) / n, float(n - 1))


def _replicate_part(layout: np.ndarray) -> Part | None:
    """One arm's replicates' share: its (…, R, n) layout's replicate means' variance over its R, with its own R − 1
    degrees of freedom; ``None`` at R = 1 (one search has no spread: the interval is about its winner)."""
    replicates = layout.shape[-2]
    if replicates < 2:
        return None
    return Part(layout.mean(axis=-1).var(axis=-1, ddof=1) / replicates, float(replicates - 1))


def _merged(p: Part, q: Part) -> Part:
    """Two arms' replicate parts as one: their sum at Satterthwaite's degrees of freedom taken :data:`SHRINK` of the
    way up from the smaller part's (at the smaller part's where both variances are 0)."""
    total = p.variance + q.variance
    smaller = min(float(p.df), float(q.df))
    den = np.asarray(p.variance**2 / p.df + q.variance**2 / q.df, dtype=float)
    satterthwaite = np.divide(total**2, den, out=np.full(den.shape, smaller), where=den > 0)
    return Part(total, smaller + SHRINK * (satterthwaite - smaller))


def _arm_parts(a: np.ndarray, b: np.ndarray) -> list[Part]:
    """The two arms' replicate parts: merged when both arms have 2 or more degrees of freedom (R ≥ 3), else each on
    its own (an arm with one replicate adds none)."""
    parts = [p for p in (_replicate_part(a), _replicate_part(b)) if p is not None]
    if len(parts) == 2 and min(float(p.df) for p in parts) >= 2:
        return [_merged(*parts)]
    return parts


def crossed_mean(layout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The grand mean of a (…, R, n) replicates × seeds layout and its 95 % half-width: the seeds' part (their means
    over the replicates) and the replicates' part, each at its own t quantile. Leading axes are independent layouts
    (a simulation's draws)."""
    x = np.asarray(layout, dtype=float)
    parts = [_seed_part(x.mean(axis=-2))]
    if (replicate := _replicate_part(x)) is not None:
        parts.append(replicate)
    return x.mean(axis=(-2, -1)), _half_width(parts)


def delta_parts(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, list[Part]]:
    """``mean(a) − mean(b)`` of two (…, R, n) layouts on the same n seeds (R may differ) and the variance parts of
    its interval: the paired per-seed differences' part, then each arm's own replicate part (:func:`_arm_parts`:
    merged when both have R ≥ 3; none for an arm of one replicate). What a verdict's p-value, its minimum detectable
    effect and the sequential rule's looks are computed from, so all are of this one interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    paired = x.mean(axis=-2) - y.mean(axis=-2)
    return paired.mean(axis=-1), [_seed_part(paired), *_arm_parts(x, y)]


def crossed_delta(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``mean(a) − mean(b)`` of two (…, R, n) layouts on the same n seeds (R may differ) and its 95 % half-width
    over :func:`delta_parts`, each part at its own t quantile."""
    delta, parts = delta_parts(a, b)
    return delta, _half_width(parts)


def left_out_replicates(replicates: Sequence[Mapping[int, float]]) -> tuple[int, ...]:
    """The replicates (their indices) that pooling leaves out: those with fewer than :data:`MIN_SEEDS` values (no
    final values, or one)."""
    return tuple(i for i, values in enumerate(replicates) if len(values) < MIN_SEEDS)


def left_out_line(label: str, replicates: Sequence[Mapping[int, float]]) -> str | None:
    """One line saying which of ``label``'s replicates pooling leaves out and why, and what it pools over
    (``ms.p0.2: replicate 2 has no final values (none of its final runs finished): pooled over replicates 0, 1``);
    ``None`` when every replicate is pooled."""
    out = left_out_replicates(replicates)
    if not out:
        return None
    why = "; ".join(
        f"replicate {i} has no final values (none of its final runs finished)"
        if not replicates[i]
        else f"replicate {i} has 1 final value (its other final runs are missing or failed: no spread over seeds)"
        for i in out
    )
    kept = [str(i) for i in range(len(replicates)) if i not in out]
    pooled = f"pooled over replicate{'s' if len(kept) > 1 else ''} {', '.join(kept)}" if kept else "nothing to pool"
    return f"{label}: {why}: {pooled}"


def _complete(replicates: Sequence[Mapping[int, float]]) -> list[Mapping[int, float]]:
    out = set(left_out_replicates(replicates))
    return [values for i, values in enumerate(replicates) if i not in out]


def _common(replicates: Sequence[Mapping[int, float]]) -> list[int]:
    return sorted(set.intersection(*(set(v) for v in replicates))) if replicates else []


def _layout(replicates: Sequence[Mapping[int, float]], seeds: list[int]) -> np.ndarray:
    """``(replicates, seeds)`` values: each replicate's value for each common seed, in seed order."""
    return np.array([[v[s] for s in seeds] for v in replicates], dtype=float)


def replicated_mean(
    replicates: Sequence[Mapping[int, float]], bounds: tuple[float, float] | None = None
) -> ReplicatedInterval | None:
    """``(mean, ci95_low, ci95_high, seeds)`` of a value over replicates × the seeds common to them (each replicate:
    seed → value): :func:`crossed_mean`, cut to ``bounds`` (as :func:`t_interval`). Replicates with fewer than 2
    values are left out (:func:`left_out_line` says which); ``None`` when fewer than 2 seeds are common to the rest."""
    complete = _complete(replicates)
    seeds = _common(complete)
    if len(seeds) < MIN_SEEDS:
        return None
    mean, half = (float(v) for v in crossed_mean(_layout(complete, seeds)))
    low, high = _within(mean - half, mean + half, bounds)
    return ReplicatedInterval(mean, low, high, len(seeds))


def replicated_delta(x: Sequence[Mapping[int, float]], y: Sequence[Mapping[int, float]]) -> ReplicatedInterval | None:
    """``(delta, ci95_low, ci95_high, seeds)`` of ``x − y``, each a list of replicates (seed → value), over the seeds
    common to all: :func:`crossed_delta` (the seeds pair the sides; each side's replicates are its own independent
    searches, with their own variance over their own R). With one replicate a side it is the paired t-interval over
    the seeds, exactly. Replicates with fewer than 2 values are left out (:func:`left_out_line`); ``None`` when a side
    has no replicate left or fewer than 2 seeds are common to the rest."""
    a, b = _complete(x), _complete(y)
    seeds = _common([*a, *b]) if a and b else []
    if len(seeds) < MIN_SEEDS:
        return None
    delta, half = (float(v) for v in crossed_delta(_layout(a, seeds), _layout(b, seeds)))
    return ReplicatedInterval(delta, delta - half, delta + half, len(seeds))

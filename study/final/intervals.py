"""The one 95 % confidence interval of a mean over seeds: Student's t (mean ± t₀.₉₇₅,ₙ₋₁ · s/√n).

With 3–10 seeds a bootstrap interval is too narrow (it cannot extrapolate beyond the observed spread); the
t-interval is the textbook choice. The final stage's summary (:data:`trainables.schema.record.FINAL_SUMMARY_FILE`, the parent
run's metrics), the dashboards' tables and the comparison's paired differences all use this function.

Over ``search.replicates`` (independent searches, each winner retrained on the same seeds) the interval is a two-level
bootstrap instead (:func:`replicate_draws`): with R = 2 or 3 replicates no t-interval over them means anything, and
the seeds are shared by every replicate (a crossed factor), which a t-interval over all R × n values would ignore.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["t_interval", "CONFIDENCE", "replicate_draws", "replicated_mean", "BOOTSTRAP_SAMPLES", "BOOTSTRAP_SEED"]

#: The coverage of every interval the study reports.
CONFIDENCE = 0.95
#: Bootstrap resamples and the generator's seed: the tables are reproducible to the digit.
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0


def t_interval(values: Sequence[float]) -> tuple[float, float, float, float]:
    """``(mean, std, ci95_low, ci95_high)`` of ``values`` (sample std; the interval is NaN for one value, and the
    point itself when all values are equal)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df=x.size - 1)) * std / math.sqrt(x.size)
    return mean, std, mean - half, mean + half


def replicate_draws(arrays: Sequence[np.ndarray], samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Bootstrap draws of each array's grand mean, each array ``(replicates, seeds)`` over the same seeds in the same
    order: per draw the seeds are resampled with replacement **once for all** arrays (a seed is the same noisy labels
    and initialisation for every replicate and arm: crossed, Owen 2007, "The pigeonhole bootstrap"), and each array's
    replicates **independently** (Davison & Hinkley 1997, §3.8: the top-level units, then within them). The generator
    draws the seeds first, then each array's replicates in order: callers stay reproducible draw for draw."""
    n = arrays[0].shape[1]
    drawn = rng.integers(0, n, size=(samples, 1, n))
    picks = [rng.integers(0, len(a), size=(samples, len(a), 1)) for a in arrays]
    return [a[pick, drawn].mean(axis=(1, 2)) for a, pick in zip(arrays, picks)]


def replicated_mean(
    replicates: Sequence[Mapping[int, float]], samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float, int] | None:
    """``(mean, ci95_low, ci95_high, seeds)`` of a value over replicates × the seeds common to all (each replicate:
    seed → value), the interval :func:`replicate_draws`' percentiles; ``None`` with fewer than 2 common seeds."""
    common = sorted(set.intersection(*(set(v) for v in replicates))) if replicates else []
    if len(common) < 2:
        return None
    a = np.array([[v[s] for s in common] for v in replicates], dtype=float)
    (boot,) = replicate_draws([a], samples, np.random.default_rng(seed))
    low, high = np.percentile(boot, [50 - 50 * CONFIDENCE, 50 + 50 * CONFIDENCE])
    return float(a.mean()), float(low), float(high), len(common)

"""Coverage of the probability of improvement's interval (:func:`dashboards.stats.improvement_interval`), by
simulation, and of the verdicts' error rates at the table's level.

The model is :mod:`tests.study.final.test_intervals_coverage`'s: a value is an arm's effect, plus its replicate's
(its search's winner: sd ``search`` per arm), plus the seed's (sd 0.01, shared by every arm and replicate: the same
noisy labels and initialisation), plus noise (sd 0.005). P(A > B) estimates, given the searches that ran, the
probability that A's run beats B's on the same seed, averaged over the replicate pairs: for replicates i, j it is
Φ((Δ + u_i − v_j) / (√2 · 0.005)) exactly (the seed effect cancels), averaged over i, j. Vectorised over draws: each
case draws all its tables at once.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from dashboards import stats

NOISE, SEED_SD, DRAWS = 0.005, 0.01, 2000


def _tables(rng: np.random.Generator, shape: tuple[int, int, int], delta: float, search: tuple[float, float]):
    """``(a, b, truth)``: draws × replicates × seeds values of A and B, and each draw's P(A > B) given its searches."""
    ra, rb, n = shape
    seed = rng.normal(0.0, SEED_SD, (DRAWS, 1, n))
    u = rng.normal(0.0, search[0], (DRAWS, ra, 1))
    v = rng.normal(0.0, search[1], (DRAWS, rb, 1))
    a = delta + u + seed + rng.normal(0.0, NOISE, (DRAWS, ra, n))
    b = v + seed + rng.normal(0.0, NOISE, (DRAWS, rb, n))
    gap = delta + u[:, :, None, 0] - v[:, None, :, 0]  # draws × ra × rb
    truth = sps.norm.cdf(gap / (np.sqrt(2.0) * NOISE)).mean(axis=(1, 2))
    return a, b, truth


CASES = [
    (shape, delta, search)
    for shape in ((1, 1, 3), (1, 1, 5), (1, 1, 7), (2, 2, 5), (2, 3, 7), (3, 3, 3), (3, 3, 7))
    for delta in (0.0, 0.004, 0.01)
    for search in ((0.0, 0.0), (0.02, 0.005))
]


def test_the_probability_of_improvement_covers_at_least_93_percent_in_every_case():
    """42 cases (1–3 replicates a side, 3–7 seeds, P from 0.5 to 0.92, searches that vary or not): the interval holds
    the draw's P(A > B) in ≥ 93 % of 2,000 draws each (Clopper–Pearson: exact at one replicate, conservative above)."""
    rng = np.random.default_rng(65)
    worst = 1.0
    for shape, delta, search in CASES:
        a, b, truth = _tables(rng, shape, delta, search)
        wins = (a[:, :, None, :] > b[:, None, :, :]).mean(axis=(1, 2))
        value, low, high = stats.improvement_interval(wins)
        covered = float(np.mean((low <= truth) & (truth <= high)))
        assert covered >= 0.93, (shape, delta, search, covered)
        worst = min(worst, covered)
    assert worst < 0.999  # the check can fail: some case is near its promise


def test_the_interval_is_the_one_the_comparison_prints():
    """:func:`dashboards.stats.probability_of_improvement` on one table is :func:`improvement_interval` of its seeds'
    shares, the shares counted by brute force over every (A replicate, B replicate, seed) triple (ties ½)."""
    x = [{0: 0.60, 1: 0.62, 2: 0.65, 3: 0.50}, {0: 0.58, 1: 0.63, 2: 0.61, 3: 0.55}]
    y = [{0: 0.58, 1: 0.62, 2: 0.60, 3: 0.56}]
    got = stats.probability_of_improvement(x, y)
    wins = [sum((xi[s] > yj[s]) + 0.5 * (xi[s] == yj[s]) for xi in x for yj in y) / 2 for s in range(4)]
    assert wins == [0.75, 0.75, 1.0, 0.0]  # seed 0: 0.60 > 0.58, 0.58 = 0.58 (½)
    expected = [float(v) for v in stats.improvement_interval(np.array(wins))]
    assert got is not None and (got.value, got.low, got.high) == pytest.approx(expected)
    assert got.value == pytest.approx(2.5 / 4) and (got.seeds, got.pairs) == (4, 2)
    # Clopper–Pearson by hand at 3 wins of 4 (one replicate a side): Beta(3, 2) and Beta(4, 1) quantiles.
    _, low, high = stats.improvement_interval(np.array([1.0, 1.0, 0.0, 1.0]))
    assert (float(low), float(high)) == pytest.approx((sps.beta.ppf(0.025, 3, 2), sps.beta.ppf(0.975, 4, 1)))
    _, low, high = stats.improvement_interval(np.array([1.0, 1.0, 1.0]))
    assert float(high) == 1.0 and float(low) == pytest.approx(0.025 ** (1 / 3))

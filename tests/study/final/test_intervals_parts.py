"""The replicated intervals' construction, against numbers written out here with scipy (each part at its own t
quantile; two arms' replicate parts merged at a shrunk Satterthwaite df when both have 3 or more replicates), their
named results, and the pooling of a replicate with missing final values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from study.final.intervals import (
    SHRINK,
    Interval,
    ReplicatedInterval,
    crossed_interval,
    left_out_line,
    left_out_replicates,
    replicated_delta,
    replicated_mean,
    t_interval,
)

T = 0.975
A = [{0: 0.61, 1: 0.64, 2: 0.58, 3: 0.66}, {0: 0.65, 1: 0.66, 2: 0.63, 3: 0.69}, {0: 0.60, 1: 0.62, 2: 0.59, 3: 0.61}]
B = [{0: 0.60, 1: 0.61, 2: 0.57, 3: 0.64}, {0: 0.60, 1: 0.62, 2: 0.58, 3: 0.63}, {0: 0.59, 1: 0.63, 2: 0.56, 3: 0.64}]


def _matrix(replicates) -> np.ndarray:
    return np.array([[r[s] for s in sorted(r)] for r in replicates])


def test_each_part_takes_its_own_t_quantile():
    low, high = crossed_interval(1.0, [(0.01, 4), (0.04, 1), (0.5, 0)])  # a part without df adds nothing
    half = math.sqrt(stats.t.ppf(T, 4) ** 2 * 0.01 + stats.t.ppf(T, 1) ** 2 * 0.04)
    assert (low, high) == pytest.approx((1.0 - half, 1.0 + half), abs=1e-12)
    assert all(math.isnan(v) for v in crossed_interval(1.0, [(0.01, 0)]))


def test_the_mean_sums_the_seed_part_and_the_replicate_part_each_at_its_own_t():
    a = _matrix(A)
    seed, replicate = a.mean(axis=0).var(ddof=1) / 4, a.mean(axis=1).var(ddof=1) / 3
    half = math.sqrt(stats.t.ppf(T, 3) ** 2 * seed + stats.t.ppf(T, 2) ** 2 * replicate)
    out = replicated_mean(A)
    assert out == pytest.approx((a.mean(), a.mean() - half, a.mean() + half, 4), abs=1e-12)
    assert isinstance(out, ReplicatedInterval) and out.value == out[0] and out.seeds == 4


def test_a_delta_keeps_each_arms_replicate_variance_and_merges_them_at_3_or_more_replicates():
    a, b = _matrix(A), _matrix(B)
    paired = a.mean(axis=0) - b.mean(axis=0)
    seed = paired.var(ddof=1) / 4
    va, vb = a.mean(axis=1).var(ddof=1) / 3, b.mean(axis=1).var(ddof=1) / 3
    satterthwaite = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    df = 2 + SHRINK * (satterthwaite - 2)
    half = math.sqrt(stats.t.ppf(T, 3) ** 2 * seed + stats.t.ppf(T, df) ** 2 * (va + vb))
    assert replicated_delta(A, B) == pytest.approx((paired.mean(), paired.mean() - half, paired.mean() + half, 4))
    # Two replicates of A (1 df): its part keeps its own t, B's its own.
    a2 = a[:2]
    va2 = a2.mean(axis=1).var(ddof=1) / 2
    paired2 = a2.mean(axis=0) - b.mean(axis=0)
    half2 = math.sqrt(
        stats.t.ppf(T, 3) ** 2 * paired2.var(ddof=1) / 4 + stats.t.ppf(T, 1) ** 2 * va2 + stats.t.ppf(T, 2) ** 2 * vb
    )
    out = replicated_delta(A[:2], B)
    assert out is not None and (out.low, out.high) == pytest.approx((paired2.mean() - half2, paired2.mean() + half2))


def test_the_results_are_named_and_unpack_as_before():
    mean, std, low, high = t_interval([0.5, 0.6, 0.7])
    named = t_interval([0.5, 0.6, 0.7])
    assert isinstance(named, Interval) and (named.mean, named.std, named.low, named.high) == (mean, std, low, high)
    value, low, high, seeds = replicated_delta(A, B) or ReplicatedInterval(0.0, 0.0, 0.0, 0)
    assert seeds == 4 and low < value < high


def test_a_replicate_without_final_values_is_left_out_and_said_in_one_line():
    with_missing = [*A[:2], {}]
    assert replicated_mean(with_missing) == replicated_mean(A[:2]) and replicated_mean(with_missing) is not None
    assert left_out_replicates(with_missing) == (2,)
    assert left_out_line("ms.p0.2", with_missing) == (
        "ms.p0.2: replicate 2 has no final values (none of its final runs finished): pooled over replicates 0, 1"
    )
    assert left_out_line("ms.p0.2", A) is None
    assert replicated_delta(with_missing, B) == replicated_delta(A[:2], B)
    assert replicated_delta(B, [{}, A[1]]) == replicated_delta(B, [A[1]])


def test_a_replicate_with_one_final_value_is_left_out_and_nothing_left_gives_none():
    one = [{0: 0.6}, A[1]]
    assert replicated_mean(one) == replicated_mean([A[1]])
    assert left_out_line("bspml.p0.2", one) == (
        "bspml.p0.2: replicate 0 has 1 final value (its other final runs are missing or failed: no spread over "
        "seeds): pooled over replicate 1"
    )
    assert replicated_mean([{}, {0: 0.5}]) is None and replicated_delta([{}], B) is None
    assert left_out_line("x", [{}, {}]) == (
        "x: replicate 0 has no final values (none of its final runs finished); replicate 1 has no final values (none "
        "of its final runs finished): nothing to pool"
    )
    # Replicates kept but without 2 seeds in common: nothing to pool over, as before.
    assert replicated_mean([{0: 0.5, 1: 0.6}, {2: 0.5, 3: 0.6}]) is None

"""The comparison statistics against hand-computed values and independent scipy calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from dashboards import stats
from study.final import stage as final_stage


def test_the_cell_interval_is_the_final_stages_own():
    from dashboards.compare import rows

    assert rows.t_interval is final_stage.t_interval


def test_paired_difference_by_hand_and_against_scipy():
    x, y = [0.60, 0.62, 0.65], [0.58, 0.61, 0.60]
    d = stats.paired_difference(x, y)
    # By hand: d = 0.02, 0.01, 0.05; mean 0.026667; sd = sqrt(((-0.006667)² + (-0.016667)² + 0.023333²) / 2)
    # = 0.020817; se = 0.012019; t₀.₉₇₅,₂ = 4.302653; half width 0.051713.
    assert d.paired and d.n == 3
    assert d.delta == pytest.approx(0.026667, abs=1e-6)
    assert d.low == pytest.approx(0.026667 - 0.051713, abs=1e-5)
    assert d.high == pytest.approx(0.026667 + 0.051713, abs=1e-5)
    ref = sps.ttest_rel(x, y)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    low, high = ref.confidence_interval(0.95)
    assert (d.low, d.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_welch_difference_against_scipy():
    x, y = [0.61, 0.64, 0.58, 0.66], [0.55, 0.57, 0.50]
    d = stats.welch_difference(x, y)
    ref = sps.ttest_ind(x, y, equal_var=False)
    low, high = ref.confidence_interval(0.95)
    assert not d.paired
    assert d.delta == pytest.approx(np.mean(x) - np.mean(y), abs=1e-12)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert (d.low, d.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_difference_pairs_on_common_seeds_and_falls_back_to_welch():
    x = {0: 0.60, 1: 0.62, 2: 0.65, 7: 0.1}
    y = {0: 0.58, 1: 0.61, 2: 0.60}
    assert stats.difference(x, y) == stats.paired_difference([0.60, 0.62, 0.65], [0.58, 0.61, 0.60])
    unpaired = stats.difference({3: 0.6, 4: 0.7}, {0: 0.5, 1: 0.52, 2: 0.49})
    assert not unpaired.paired and unpaired == stats.welch_difference([0.6, 0.7], [0.5, 0.52, 0.49])
    one_each = stats.difference({0: 0.6}, {0: 0.5})
    assert one_each.delta == pytest.approx(0.1) and math.isnan(one_each.low)


def test_holm_by_hand():
    # Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → monotone 0.06.
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = stats.holm([0.2, math.nan, 0.5])
    assert adjusted[0] == pytest.approx(0.4) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.5)
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]


def test_iqm_by_hand_and_against_scipy_trim_mean():
    assert stats.iqm(list(range(1, 9))) == pytest.approx(4.5)  # drop 1, 2 and 7, 8
    assert stats.iqm([5.0, 1.0, 100.0, 3.0, 2.0]) == pytest.approx(10 / 3)  # ⌊1.25⌋ = 1 each end: 2, 3, 5
    rng = np.random.default_rng(1)
    for n in range(4, 15):
        x = rng.normal(size=n)
        assert stats.iqm(x) == pytest.approx(sps.trim_mean(x, 0.25))


def test_probability_of_improvement_pairs_by_seed_over_every_replicate_pair():
    """P(A > B): per seed, the share of (A replicate, B replicate) pairs A wins there (ties ½), averaged over seeds;
    with one replicate a side, the share of seeds A wins (a paired, not Mann–Whitney, count)."""
    one = stats.probability_of_improvement([{0: 0.6, 1: 0.5, 2: 0.7}], [{0: 0.5, 1: 0.55, 2: 0.7}])
    assert one is not None and one.value == pytest.approx((1 + 0 + 0.5) / 3) and (one.seeds, one.pairs) == (3, 1)
    # Unpaired, A's 0.6 would beat B's 0.5 and 0.55 too (Mann–Whitney 5.5 / 9): the same-seed count does not.
    x = [{0: 0.6, 1: 0.5, 2: 0.7}, {0: 0.4, 1: 0.6, 2: 0.8}]
    y = [{0: 0.5, 1: 0.55, 2: 0.7}, {0: 0.45, 1: 0.5, 2: 0.75}]
    got = stats.probability_of_improvement(x, y)
    brute = np.mean([[(a[s] > b[s]) + 0.5 * (a[s] == b[s]) for a in x for b in y] for s in range(3)])
    assert got is not None and got.value == pytest.approx(brute) and got.pairs == 4 and got.low <= got.value
    assert stats.probability_of_improvement([{0: 0.6, 1: 0.5}], [{2: 0.6, 3: 0.5}]) is None  # no seed in common
    # A replicate without 2 values is left out, as the Δ's pooling leaves it out.
    partial = stats.probability_of_improvement([*x, {}], y)
    assert partial is not None and partial.value == pytest.approx(brute)


def test_stratified_bootstrap_resamples_within_tasks_only():
    # Two tasks of constant scores: within-task resampling always returns the same pooled mean, a pooled resample
    # would not.
    low, high = stats.stratified_bootstrap_ci(lambda ts: float(np.mean(np.concatenate(ts))), [[0.0, 0.0], [1.0] * 3])
    assert low == high == pytest.approx(0.6)
    # One task [0, 1]: the resampled mean is 0, ½, 1 with probabilities ¼, ½, ¼ → the 2.5 / 97.5 % points are 0, 1.
    low, high = stats.stratified_bootstrap_ci(lambda ts: float(np.mean(ts[0])), [[0.0, 1.0]], samples=2000)
    assert (low, high) == (0.0, 1.0)
    # Two groups resampled independently: the share of X above Y stays 1 when X is always above Y.
    above = lambda xs, ys: float(np.mean(np.asarray(xs[0])[:, None] > np.asarray(ys[0])[None, :]))
    assert stats.stratified_bootstrap_ci(above, [[2.0, 3.0]], [[0.0, 1.0]]) == (1.0, 1.0)


def test_recovered_share_by_hand_and_its_bootstrap_is_paired():
    ref_0 = {0: 0.70, 1: 0.75, 2: 0.66}
    ref_p = {0: 0.55, 1: 0.50, 2: 0.60}
    # The family wins back exactly 40 % of each seed's drop, so every paired resample has share 0.4.
    fam_p = {s: ref_p[s] + 0.4 * (ref_0[s] - ref_p[s]) for s in ref_0}
    share, low, high, paired = stats.recovered_share(fam_p, ref_p, ref_0)
    assert paired and share == pytest.approx(0.4) and low == pytest.approx(0.4) and high == pytest.approx(0.4)
    # Means 0.60, 0.55, 0.70 → 0.05 / 0.15 = 1/3 by hand.
    share, low, high, paired = stats.recovered_share(
        {0: 0.60, 1: 0.62, 2: 0.58}, {0: 0.55, 1: 0.56, 2: 0.54}, {0: 0.70, 1: 0.71, 2: 0.69}
    )
    assert share == pytest.approx(1 / 3) and low <= share <= high
    # Disjoint seeds: resampled independently, so the exact-40 % family now gets a spread.
    shifted = {s + 10: v for s, v in fam_p.items()}
    share, low, high, paired = stats.recovered_share(shifted, ref_p, ref_0)
    assert not paired and share == pytest.approx(0.4) and low < 0.4 < high
    # Reproducible: the same seed gives the same interval.
    assert stats.recovered_share(shifted, ref_p, ref_0) == stats.recovered_share(shifted, ref_p, ref_0)


# The search's own variance (issue 50): replicates × seeds. Seven seeds, the reference near 0.5.
_REF = {s: 0.5 + 0.01 * v for s, v in enumerate([0.3, -1.1, 0.8, 0.0, -0.4, 1.2, -0.6])}
_ARM = {s: _REF[s] + 0.01 + 0.005 * v for s, v in enumerate([1.0, -0.5, 0.2, 0.9, -1.3, 0.4, 0.1])}


def _paired_t(x, y):
    """The independent reference: scipy's one-sample t-interval of the per-seed differences."""
    from scipy import stats as sps

    d = np.array([x[s] - y[s] for s in sorted(x)])
    return sps.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sps.sem(d))


def test_one_replicate_is_the_paired_t_interval_and_identical_replicates_add_nothing():
    one = stats.replicated_difference([_ARM], [_REF])
    assert one is not None and one.seeds == 7 and len(one.parts) == 1
    assert one.delta == pytest.approx(np.mean([_ARM[s] - _REF[s] for s in _REF]), abs=1e-15)
    assert (one.low, one.high) == pytest.approx(_paired_t(_ARM, _REF), abs=1e-12)
    paired = stats.paired_difference(list(_ARM.values()), list(_REF.values()))
    assert stats.p_value(one.delta, one.parts) == pytest.approx(paired.p_value, rel=1e-12)
    same = stats.replicated_difference([_ARM] * 3, [_REF] * 2)  # the replicate level has no variance: adds nothing
    assert same is not None and (same.delta, same.low, same.high) == pytest.approx(
        (one.delta, one.low, one.high), abs=1e-12
    )


def test_replicates_that_disagree_in_sign_widen_the_interval():
    """Arm replicates shifted +0.02, +0.01, −0.015 and reference replicates 0, +0.005 over the same seeds: the
    overall Δ is the one-replicate Δ + 0.005 − 0.0025, and the search's variance dominates the seeds'."""
    base = stats.replicated_difference([_ARM], [_REF])
    arm = [{s: v + shift for s, v in _ARM.items()} for shift in (0.02, 0.01, -0.015)]
    ref = [{s: v + shift for s, v in _REF.items()} for shift in (0.0, 0.005)]
    out = stats.replicated_difference(arm, ref)
    assert base is not None and out is not None
    assert out.delta == pytest.approx(base.delta + 0.0025, abs=1e-12) and out.delta > 0
    assert out.high - out.low > 2 * (base.high - base.low)
    assert out.low < 0 < out.high and not out.significant and base.significant
    assert stats.replicated_difference([_ARM], [{0: 0.5, 9: 0.6}]) is None  # fewer than 2 common seeds
    # A lost replicate is left out of its side whatever its position: nothing pairs replicates by index.
    lost = stats.replicated_difference([arm[0], {}, arm[2]], ref)
    assert lost == stats.replicated_difference([arm[0], arm[2]], ref)


def test_the_parts_give_the_crossed_interval_and_their_p_value_and_mde_match_it():
    """The verdict's parts are the crossed interval's: their 95 % half-width is ``replicated_delta``'s; the p-value is
    the level at which that interval just reaches 0 (found again by brute force over levels), and the minimum
    detectable effect is (t_0.975 + t_0.8) × SE for one part, ≈ 2.8 SE at many degrees of freedom."""
    from study.final.intervals import replicated_delta

    arm = [{s: v + shift for s, v in _ARM.items()} for shift in (0.02, 0.01, -0.015)]
    ref = [{s: v + shift for s, v in _REF.items()} for shift in (0.0, 0.005, 0.002)]
    for x, y in ((arm[:2], ref[:1]), (arm, ref), (arm[:2], ref)):
        d, crossed = stats.replicated_difference(x, y), replicated_delta(x, y)
        assert d is not None and crossed is not None
        assert stats.half_width(d.parts) == pytest.approx(crossed.high - crossed.value, rel=1e-12)
        p = stats.p_value(d.delta, d.parts)
        levels = np.linspace(0.0, 0.999, 200_000)  # every level's half-width at once: √Σ t²(q, df) v
        halves = np.sqrt(sum(sps.t.ppf(0.5 + levels / 2, float(q.df)) ** 2 * float(q.variance) for q in d.parts))
        assert 1 - levels[np.argmax(halves >= abs(d.delta))] == pytest.approx(p, abs=1e-5)
    one = stats.replicated_difference([_ARM], [_REF])
    assert one is not None
    se = np.std([_ARM[s] - _REF[s] for s in _REF], ddof=1) / math.sqrt(7)
    expected = (sps.t.ppf(0.975, 6) + sps.t.ppf(0.8, 6)) * se
    assert stats.min_detectable_effect(one.parts) == pytest.approx(expected, rel=1e-12)
    big = (stats.Part(np.asarray(1.0), 10_000.0),)
    assert stats.min_detectable_effect(big) == pytest.approx(2.8, abs=0.01)
    assert stats.p_value(0.0, big) == 1.0 and stats.p_value(0.3, ()) != stats.p_value(0.3, ())  # NaN without parts

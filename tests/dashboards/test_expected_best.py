"""The expected best validation score against the number of trials (dashboards.expected_best): both estimators
against brute force over every draw, the band by simulation, the climbing/flat rule and the crossing of two curves
on constructed data, and which trials count."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dashboards.expected_best import (
    MIN_TRIALS,
    WITH_REPLACEMENT,
    WITHOUT_REPLACEMENT,
    FullScores,
    budget,
    crossing_line,
    crossings,
    curve,
    curves_cross,
    expected_best,
    full_scores,
    of_trials,
    tie_spread,
)


def _brute(values: list[float], k: int, replace: bool, mode: str = "max") -> float:
    """The mean over every draw of k of ``values`` (ordered tuples with replacement, or k-subsets without) of the best
    drawn: what each estimator estimates, by enumeration."""
    best = max if mode == "max" else min
    draws = itertools.product(values, repeat=k) if replace else itertools.combinations(values, k)
    found = [best(d) for d in draws]
    return sum(found) / len(found)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
@pytest.mark.parametrize("mode", ["max", "min"])
def test_both_estimators_equal_brute_force_over_every_draw(n, mode):
    rng = np.random.default_rng(n)
    values = [float(v) for v in rng.normal(size=n)]
    if n >= 3:
        values[1] = values[2]  # a tie among the scores changes nothing
    with_r = expected_best(values, mode, WITH_REPLACEMENT)
    without = expected_best(values, mode, WITHOUT_REPLACEMENT)
    for k in range(1, n + 1):
        assert with_r[k - 1] == pytest.approx(_brute(values, k, True, mode), abs=1e-12)
        assert without[k - 1] == pytest.approx(_brute(values, k, False, mode), abs=1e-12)


def test_the_curves_start_at_the_mean_climb_and_end_at_or_under_the_best():
    rng = np.random.default_rng(3)
    for n in (2, 7, 40, 300):
        values = rng.beta(5, 2, size=n)
        for estimator in (WITH_REPLACEMENT, WITHOUT_REPLACEMENT):
            c = expected_best(values, "max", estimator)
            assert len(c) == n and c[0] == pytest.approx(values.mean())
            assert np.all(np.diff(c) >= -1e-12)  # monotone in k
            assert c[-1] <= values.max() + 1e-12
        # Without replacement a search of all n trials finds the best of them; with replacement it may miss it.
        assert expected_best(values, estimator=WITHOUT_REPLACEMENT)[-1] == pytest.approx(values.max())
        low = expected_best(values, "min")
        assert low[0] == pytest.approx(values.mean()) and np.all(np.diff(low) <= 1e-12)


def test_the_without_replacement_weights_hold_where_binomials_overflow():
    values = np.linspace(0.0, 1.0, 1500)
    c = expected_best(values, estimator=WITHOUT_REPLACEMENT)
    # Evenly spaced on [0, 1]: the largest rank of k drawn without replacement from 1 … n has mean k (n + 1)/(k + 1)
    # (the hockey-stick identity), so E[best of k] = (k (n + 1)/(k + 1) − 1)/(n − 1); C(1500, 750) overflows a float.
    n = len(values)
    k = np.arange(1, n + 1)
    assert np.all(np.isfinite(c))
    assert c == pytest.approx(k * (n + 1) / ((k + 1) * (n - 1)) - 1 / (n - 1), abs=1e-9)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="non-empty vector of finite scores"):
        expected_best([0.5, math.nan])
    with pytest.raises(ValueError, match="mode must be"):
        expected_best([0.5], "best")
    with pytest.raises(ValueError, match="estimator must be"):
        expected_best([0.5], estimator="plugin")


@pytest.mark.parametrize(
    "draw",
    [
        lambda rng, n: rng.uniform(size=n),
        lambda rng, n: 0.9 - rng.exponential(0.05, size=n),  # scores crowding under a ceiling
    ],
    ids=["uniform", "under_a_ceiling"],
)
def test_the_band_holds_the_estimators_expectation(draw):
    """Coverage by simulation: the curve's expectation (the mean of 4000 curves of fresh trials) lies inside the
    ± 1.96 bootstrap-sd band of one draw of n trials in at least 85 % of 200 draws, at k = 1, n/2 and n."""
    rng = np.random.default_rng(11)
    n = 20
    expected = np.mean([expected_best(draw(rng, n)) for _ in range(4000)], axis=0)
    inside = np.zeros(n)
    for seed in range(200):
        c = curve(draw(rng, n), resamples=300, seed=seed)
        inside += (c.low <= expected) & (expected <= c.high)
    coverage = inside / 200
    assert coverage[[0, n // 2 - 1, n - 1]].min() >= 0.85, coverage


def test_the_band_at_one_trial_is_the_means_and_narrows_with_more_trials():
    rng = np.random.default_rng(5)
    small, large = rng.normal(size=25), rng.normal(size=400)
    for values in (small, large):
        c = curve(values, resamples=4000, seed=1)
        # At k = 1 the curve is the mean: its bootstrap sd is s/√n (population s), up to resampling noise.
        assert c.sd[0] == pytest.approx(values.std() / math.sqrt(len(values)), rel=0.08)
        assert np.all(c.low <= c.mean) and np.all(c.mean <= c.high)
    assert curve(large).sd[0] < curve(small).sd[0] / 2.5  # 16× the trials: about a quarter of the sd
    assert np.array_equal(curve(small, seed=3).low, curve(small, seed=3).low)  # seeded: repeatable
    minimised = curve(-small, "min", seed=1)
    assert minimised.mean == pytest.approx(-curve(small, seed=1).mean)
    assert minimised.low == pytest.approx(-curve(small, seed=1).high)


def _scores(values: list[float]) -> FullScores:
    return FullScores(tuple(values), tuple(range(len(values))), len(values))


#: A cell whose best two trials are close and far above the rest: half the budget often misses them both.
TIGHT_TOP = [0.0, 0.0, 0.0, 0.0, 0.99, 1.0]


def test_climbing_when_the_last_half_beat_the_tie_sets_spread():
    n = len(TIGHT_TOP)
    rise = _brute(TIGHT_TOP, n, True) - _brute(TIGHT_TOP, n // 2, True)  # about 0.2
    found = budget("ms.p0.2", curve(TIGHT_TOP), _scores(TIGHT_TOP), tie_set=2)
    assert found.rise == pytest.approx(rise) and found.threshold == pytest.approx(0.01)
    assert found.climbing is True
    assert found.line().startswith("budget: ms.p0.2: still climbing at n = 6: the last 3 trials improved the expected")
    assert "the tie set's spread 0.0100 (2 candidates)" in found.line()
    # A tie set of all six: its spread (1.0) is more than the rise: flat.
    flat = budget("ms.p0.2", curve(TIGHT_TOP), _scores(TIGHT_TOP), tie_set=6)
    assert flat.threshold == pytest.approx(1.0) and flat.climbing is False
    assert flat.line().startswith("budget: ms.p0.2: flat at n = 6:") and "not more than" in flat.line()
    # Minimised scores, mirrored: the same answer.
    mirrored = [-v for v in TIGHT_TOP]
    assert budget("m", curve(mirrored, "min"), _scores(mirrored), tie_set=2).rise == pytest.approx(rise)


def test_flat_when_more_trials_only_found_what_the_validation_cannot_tell_apart():
    values = [0.800, 0.801, 0.802, 0.803, 0.804, 0.805]
    rise = _brute(values, 6, True) - _brute(values, 3, True)
    found = budget("spl.p0.2", curve(values), _scores(values), tie_set=3)
    assert found.threshold == pytest.approx(0.002) and found.rise == pytest.approx(rise)
    assert rise < 0.002 and found.climbing is False


def test_without_a_tie_set_of_two_the_rise_is_held_against_the_bootstrap_sd():
    c = curve(TIGHT_TOP)
    for tie_set, why in ((None, "no tie set of two or more"), (1, "the winner is clear")):
        found = budget("c", c, _scores(TIGHT_TOP), tie_set)
        assert found.threshold == pytest.approx(c.sd[-1])
        assert f"the bootstrap sd of E[best of 6] {c.sd[-1]:.4f} ({why}: no tie set's spread)" in found.line()
    few = [0.1, 0.5, 0.9]
    assert len(few) < MIN_TRIALS
    too_few = budget("c", curve(few), _scores(few), 2)
    assert too_few.climbing is None and "too few trials to say" in too_few.line()


def test_the_tie_sets_spread_is_the_best_minus_the_t_th_best():
    assert tie_spread([0.5, 0.9, 0.7, 0.8], "max", 3) == pytest.approx(0.2)
    assert tie_spread([0.5, 0.9, 0.7, 0.8], "min", 2) == pytest.approx(0.2)
    assert tie_spread([0.5, 0.9], "max", 5) == pytest.approx(0.4)  # capped at the trials there are


def _trial(number, state, value, steps=None):
    return SimpleNamespace(
        number=number, state=SimpleNamespace(name=state), value=value, intermediate_values=steps or {}
    )


def test_only_trials_that_trained_every_epoch_count():
    trials = [
        _trial(4, "COMPLETE", 0.7),  # no intermediate values: COMPLETE means every epoch
        _trial(1, "COMPLETE", 0.6, {1: 0.4, 2: 0.5, 3: 0.6}),
        _trial(2, "PRUNED", 0.9, {1: 0.9}),  # stopped at a rung: no full score
        _trial(3, "PRUNED", 0.8, {1: 0.5, 2: 0.7, 3: 0.8}),  # stopped at the last rung, which is the end
        _trial(5, "FAIL", None),
        _trial(6, "COMPLETE", math.nan),
        _trial(7, "RUNNING", None, {1: 0.99}),
    ]
    found = full_scores(trials, epochs=3)
    assert found.values == (0.6, 0.8, 0.7) and found.numbers == (1, 3, 4) and found.ended == 6
    assert found.text() == "3 of 6 ended trials trained every epoch"
    cell = of_trials("ms.p0.2", trials, 3, "max")
    assert cell.curve is not None and cell.curve.mean[0] == pytest.approx(0.7)
    empty = of_trials("ms.p0.4", [_trial(0, "PRUNED", 0.5, {1: 0.5})], 3, "max")
    assert empty.curve is None and empty.line() == (
        "budget: ms.p0.4: no expected best: no trial trained every epoch (0 of 1 ended trials trained every epoch)"
    )


def test_curves_cross_where_the_leader_changes():
    assert crossings([0.5, 0.6, 0.7], [0.55, 0.6, 0.65]) == (3,)
    assert curves_cross([0.5, 0.6, 0.7], [0.55, 0.6, 0.65])
    assert not curves_cross([0.5, 0.6, 0.7], [0.4, 0.6, 0.6])  # equal at k = 2 is no change of leader
    assert crossings([0.1, 0.3, 0.2, 0.5], [0.2, 0.2, 0.3, 0.4]) == (2, 3, 4)
    assert crossings([0.5, 0.6, 0.7, 0.8], [0.4, 0.7]) == (2,)  # over the budget both ran
    line = crossing_line([0.5, 0.6, 0.7], [0.55, 0.6, 0.65], ("bspml", "ms"))
    assert line == "the curves cross at k = 3: a verdict that flips with the budget (ms leads at k = 1, bspml at k = 3)"
    assert crossing_line([0.5, 0.6], [0.4, 0.5], ("bspml", "ms")) == (
        "the curves do not cross within k = 1 … 2: bspml leads at every budget"
    )
    assert crossing_line([0.5, 0.6], [0.4, 0.5], ("a", "b"), mode="min").endswith("b leads at every budget")
    assert crossing_line([0.5], [0.5]).startswith("the curves coincide")


def test_a_steady_arm_and_a_lucky_one_cross_where_the_lucky_ones_best_is_likely_drawn():
    """A scores 0.6 every trial; B scores 0.2 but one trial in ten 0.9. B's expected best of k is
    0.2 + 0.7 (1 − 0.9^k), above 0.6 from k > ln(3/7) / ln(0.9) = 8.04 on: the curves cross at k = 9."""
    steady, lucky = [0.6] * 10, [0.2] * 9 + [0.9]
    a, b = expected_best(steady), expected_best(lucky)
    k = np.arange(1, 11)
    assert b == pytest.approx(0.2 + 0.7 * (1 - 0.9**k))
    assert crossings(a, b) == (9,)
    assert "cross at k = 9" in crossing_line(a, b, ("steady", "lucky"))

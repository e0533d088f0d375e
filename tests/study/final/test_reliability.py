from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from scipy import stats

from study.final.reliability import Bootstrap, Reliability, reliability, scores, spearman
from trainables.metrics.per_class import PerClass


def _fold(sums, counts, classes=None) -> PerClass:
    classes = np.arange(len(sums)) if classes is None else classes
    return PerClass(classes=classes, sums=sums, counts=counts)


def _random_candidates(n=16, folds=4, classes=32, seed=0, shift=None):
    """``n`` candidates × ``folds`` folds of Recall@1-like per-class sums (hits out of each class's queries)."""
    rng = np.random.default_rng(seed)
    counts = [rng.integers(5, 30, classes) for _ in range(folds)]
    p = rng.uniform(0.3, 0.7, (n, folds, classes))
    if shift is not None:
        p = np.clip(p + np.asarray(shift)[:, None, None], 0, 1)
    return [
        [
            _fold(rng.binomial(counts[f], p[c, f]).astype(float), counts[f], np.arange(classes) + 100 * f)
            for f in range(folds)
        ]
        for c in range(n)
    ]


def test_identical_candidates_share_the_credit_exactly():
    one = [_fold([3.0, 5.5, 7.25, 1.0], [4, 8, 9, 2]), _fold([2.0, 2.0], [3, 5], [7, 9])]
    for n in (2, 5, 16):
        r = reliability([one] * n, bootstrap=Bootstrap(resamples=500))
        assert r.n == n and r.winner == 0
        assert r.p_best == pytest.approx(1 / n, abs=1e-12)
        assert r.tie_set == tuple(range(n))


def test_a_clearly_better_candidate_is_clear():
    base = _random_candidates(n=6, folds=1, classes=40, seed=1)
    counts = base[0][0].counts
    better = [_fold(np.minimum(base[3][0].sums + 0.3 * counts, counts), counts, base[3][0].classes)]
    candidates = [*base[:3], better, *base[4:]]
    r = reliability(candidates)
    assert r.winner == 3
    assert r.p_best > 0.99
    assert r.tie_set == (3,)


def _brute_force(sums, counts, winner):
    """Exact P(best) and "at least the winner's" frequencies over all 3³ equally likely draws of 3 classes."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    credit, as_good = [], np.zeros(len(sums))
    for draw in itertools.product(range(3), repeat=3):
        w = np.bincount(draw, minlength=3)
        s = sums @ w / (counts @ w)
        top = np.abs(s - s.max()) < 1e-12
        credit.append(top[winner] / top.sum())
        as_good += s >= s[winner] - 1e-12
    credit = np.array(credit)
    return credit.mean(), credit.std(), as_good / 27


@pytest.mark.parametrize(
    ("sums", "counts", "alpha"),
    [
        ([[8, 5, 6], [7, 6, 5.5], [5, 4, 3]], [10, 10, 10], 0.05),
        ([[8, 4, 6], [7, 5, 5], [9, 2, 3]], [10, 6, 8], 0.05),
        ([[8, 4, 6], [7, 5, 5], [9, 2, 3]], [10, 6, 8], 0.2),
        ([[8, 4, 5], [7, 5, 5], [9, 2, 2]], [10, 6, 8], 0.05),  # candidates 0 and 1 tie on the full data
    ],
)
def test_bootstrap_matches_exact_enumeration(sums, counts, alpha):
    candidates = [[_fold(s, counts)] for s in sums]
    full = scores(candidates)
    winner = min(range(3), key=lambda c: (-full[c], c))
    p_exact, sd, frequency = _brute_force(sums, counts, winner)
    assert np.all(np.abs(frequency - alpha) > 0.01)  # the test is decisive
    exact_ties = [c for c in np.argsort([-f for f in full], kind="stable") if frequency[c] >= alpha and c != winner]
    resamples = 20_000
    r = reliability(candidates, bootstrap=Bootstrap(resamples=resamples, alpha=alpha, seed=3))
    assert r.winner == winner
    assert abs(r.p_best - p_exact) < 4 * sd / np.sqrt(resamples)
    assert r.tie_set == (winner, *exact_ties)
    assert len(r.tie_set) > 1  # each case has an indistinguishable runner-up


def test_k_folds_with_different_classes():
    worse = [_fold([2.0, 3.0, 1.0], [5, 5, 5], [0, 1, 2]), _fold([4.0, 2.0], [6, 6], [10, 11])]
    better = [_fold([4.0, 4.0, 3.0], [5, 5, 5], [0, 1, 2]), _fold([5.0, 4.0], [6, 6], [10, 11])]
    r = reliability([worse, better])
    assert scores([worse, better]) == pytest.approx([(6 / 15 + 6 / 12) / 2, (11 / 15 + 9 / 12) / 2])
    assert r.winner == 1 and r.p_best == 1.0 and r.tie_set == (1,)


def test_mode_min_flips_the_comparisons():
    candidates = _random_candidates(n=5, folds=2, classes=30, seed=4, shift=[0, 0, -0.4, 0, 0])
    r_min = reliability(candidates, mode="min")
    assert r_min.winner == 2 and r_min.p_best > 0.99 and r_min.tie_set == (2,)
    assert reliability(candidates).winner != 2
    with pytest.raises(ValueError, match="mode"):
        reliability(candidates, mode="best")


def test_the_tie_set_is_ordered_by_score_and_a_given_winner_is_kept():
    candidates = _random_candidates(n=8, folds=1, classes=12, seed=5)
    full = scores(candidates)
    r = reliability(candidates)
    assert r.winner == int(np.argmax(full)) and r.tie_set[0] == r.winner
    rest = [full[c] for c in r.tie_set[1:]]
    assert rest == sorted(rest, reverse=True)
    worst = int(np.argmin(full))
    assert reliability(candidates, winner=worst).winner == worst
    assert reliability(candidates, winner=worst).tie_set[0] == worst
    with pytest.raises(ValueError, match="winner"):
        reliability(candidates, winner=8)


def test_seeded_and_fast():
    candidates = _random_candidates()
    start = time.perf_counter()
    r = reliability(candidates, bootstrap=Bootstrap(resamples=1000))
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    assert r == reliability(candidates, bootstrap=Bootstrap(resamples=1000))
    assert 0 < r.p_best < 1 and r.resamples == 1000


@pytest.mark.parametrize("seed", range(5))
def test_stability_is_spearman(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    before = rng.normal(size=n)
    after = before + rng.normal(size=n)
    if seed % 2:  # ties, ranked by their average
        before, after = np.round(before), np.round(after, 1)
    expected = stats.spearmanr(before, after).statistic
    assert spearman(before, after) == pytest.approx(expected, abs=1e-12)
    candidates = _random_candidates(n=n, folds=1, classes=10, seed=seed)
    r = reliability(candidates, last_two=list(zip(before, after)), bootstrap=Bootstrap(resamples=10))
    assert r.stability == pytest.approx(expected, abs=1e-12)


def test_stability_is_none_when_undefined():
    assert spearman([0.1, 0.2], [0.2, 0.1]) is None
    assert spearman([0.1, 0.1, 0.1], [0.2, 0.1, 0.3]) is None
    assert spearman([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]) is None
    candidates = _random_candidates(n=2, folds=1, classes=10)
    assert reliability(candidates, last_two=[(0.1, 0.2), (0.3, 0.1)]).stability is None
    assert reliability(candidates).stability is None
    with pytest.raises(ValueError, match="last_two"):
        reliability(candidates, last_two=[(0.1, 0.2)])


def test_candidates_must_share_each_folds_classes():
    a = [_fold([1.0, 2.0], [3, 3], [0, 1]), _fold([1.0], [2], [5])]
    b = [_fold([1.0, 2.0], [3, 3], [0, 2]), _fold([1.0], [2], [5])]
    with pytest.raises(ValueError, match="candidate 1's fold 0 has other classes"):
        reliability([a, b])
    with pytest.raises(ValueError, match="candidate 1 has 1 folds"):
        reliability([a, a[:1]])
    with pytest.raises(ValueError, match="at least one candidate"):
        reliability([])


def test_a_resample_where_nothing_counts_is_no_ones_best():
    # Class 1 has no counting query: a resample drawing only it scores NaN for everyone and is left out.
    a, b = [_fold([3.0, 0.0], [4, 0])], [_fold([1.0, 0.0], [4, 0])]
    r = reliability([a, b], bootstrap=Bootstrap(resamples=400))
    assert r.winner == 0 and r.tie_set == (0,) and r.p_best == 1.0
    # A candidate whose fold counts nothing where another's does is the worst there: d (2/2) beats c (3/4) unless
    # the resample draws class 0 alone (1/4), where d counts nothing.
    c = [_fold([3.0, 0.0], [4, 0])]
    d = [_fold([0.0, 2.0], [0, 2])]
    r = reliability([c, d], bootstrap=Bootstrap(resamples=4000))
    assert r.winner == 1 and r.tie_set == (1, 0) and r.p_best == pytest.approx(0.75, abs=0.03)
    # Nothing counts at all: nothing tells the candidates apart.
    e = [_fold([0.0, 0.0], [0, 0])]
    assert reliability([e, e, e], bootstrap=Bootstrap(resamples=10)).tie_set == (0, 1, 2)
    assert reliability([e, e, e], bootstrap=Bootstrap(resamples=10)).p_best == pytest.approx(1 / 3)


def test_line():
    clear = Reliability(n=8, winner=2, p_best=0.974, tie_set=(2,), stability=None, resamples=1000)
    assert clear.line("ms.p0.2") == "selection: ms.p0.2: the winner is clear (P(best) 0.97, 1/n 0.12)"
    tied = Reliability(n=8, winner=2, p_best=0.2412, tie_set=(2, 0, 5, 6, 1), stability=0.4149, resamples=1000)
    assert tied.line("ms.p0.2") == (
        "selection: ms.p0.2: the winner is one of 5 indistinguishable candidates (P(best) 0.24, 1/n 0.12); "
        "rank stability over the last two epochs ρ 0.41"
    )

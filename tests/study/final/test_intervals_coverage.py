"""The replicated intervals cover what they say: simulated nulls, checked by their coverage.

The model: a value is a replicate's effect (its search's winner, with each arm's own search sd) plus a seed's effect
shared by every replicate and arm (sd 0.01) plus noise (sd 0.005). Two arms with the same mean: the true Δ is 0. With
one replicate an arm's interval is about its searched configuration (there is no other search to vary over), so the
truth is conditional on it: its effect enters the true Δ, and for the mean the winner's own value. The simulation is
seeded and vectorised over 2,000 nulls per case (the intervals' array functions are the ones the dict functions
call: a test below holds them to it); at a true 95 %, 2,000 draws fall under 93 % in about 1 in 10⁵ cases.

Run as a script, the file prints the coverage table: ``python tests/study/final/test_intervals_coverage.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from study.final.intervals import crossed_delta, crossed_mean, replicated_delta, replicated_mean

DRAWS = 2000
GOAL = 0.93
SEED_SD, NOISE_SD = 0.01, 0.005

#: (replicates A, B), (search sd A, B), seeds.
DELTA_CASES = [
    *itertools.product(
        [(2, 3), (2, 5), (3, 3), (5, 2), (3, 5), (1, 3)],
        [(0.03, 0.0), (0.0, 0.03), (0.02, 0.005), (0.02, 0.02), (0.01, 0.01), (0.0, 0.0)],
        (5, 6, 7),
    ),
    *itertools.product([(1, 1), (2, 2), (5, 5)], [(0.0, 0.0), (0.02, 0.02)], (3, 5, 7)),
]
MEAN_CASES = list(itertools.product((1, 2, 3, 5), (0.0, 0.005, 0.02, 0.03), (3, 5, 7)))
#: Cases with a failed seed (one value missing from one replicate of A), run through the dict functions.
FAILED_SEED_CASES = [((2, 5), (0.03, 0.0), 6), ((2, 3), (0.02, 0.005), 5), ((3, 3), (0.02, 0.02), 7)]


def _arm(rng: np.random.Generator, seed_effect: np.ndarray, replicates: int, search_sd: float):
    """``(effects, values)``: per draw, each replicate's effect and its (draws, replicates, seeds) values."""
    effects = rng.normal(0.0, search_sd, (seed_effect.shape[0], replicates))
    noise = rng.normal(0.0, NOISE_SD, (*effects.shape, seed_effect.shape[1]))
    return effects, 0.5 + effects[:, :, None] + seed_effect[:, None, :] + noise


def _pair(case, draws: int = DRAWS):
    """Two arms on shared seeds, and the true Δ per draw."""
    (ra, rb), (sa, sb), seeds = case
    rng = np.random.default_rng([ra, rb, round(sa * 1e4), round(sb * 1e4), seeds])
    seed_effect = rng.normal(0.0, SEED_SD, (draws, seeds))
    (ea, a), (eb, b) = _arm(rng, seed_effect, ra, sa), _arm(rng, seed_effect, rb, sb)
    truth = (ea.mean(axis=1) if ra == 1 else 0.0) - (eb.mean(axis=1) if rb == 1 else 0.0)
    return a, b, truth


def _pooled_delta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The construction this module had before, written out independently: the paired seeds' variance over n plus the
    replicates' means' variance pooled over both arms × Σ 1/R, at t of the smaller of n − 1 and Σ (R − 1)."""
    (ra, n), rb = a.shape[1:], b.shape[1]
    paired = a.mean(axis=1) - b.mean(axis=1)
    seed = paired.var(axis=1, ddof=1) / n
    df = ra + rb - 2
    if df == 0:
        return stats.t.ppf(0.975, n - 1) * np.sqrt(seed)
    ss = sum((((x.mean(axis=2)) - x.mean(axis=2).mean(axis=1, keepdims=True)) ** 2).sum(axis=1) for x in (a, b))
    replicate = ss / df * (1 / ra + 1 / rb)
    t = np.where(replicate > 0, stats.t.ppf(0.975, min(n - 1, df)), stats.t.ppf(0.975, n - 1))
    return t * np.sqrt(seed + replicate)


def _min_df_mean(a: np.ndarray) -> np.ndarray:
    """The mean's half-width before: t at the smaller of the seed part's and the replicate part's df."""
    r, n = a.shape[1:]
    seed = a.mean(axis=1).var(axis=1, ddof=1) / n
    if r == 1:
        return stats.t.ppf(0.975, n - 1) * np.sqrt(seed)
    return stats.t.ppf(0.975, min(n - 1, r - 1)) * np.sqrt(seed + a.mean(axis=2).var(axis=1, ddof=1) / r)


def delta_row(case) -> dict[str, float]:
    a, b, truth = _pair(case)
    delta, half = crossed_delta(a, b)
    pooled = _pooled_delta(a, b)
    return {
        "covered": float(np.mean(np.abs(delta - truth) <= half)),
        "pooled covered": float(np.mean(np.abs(delta - truth) <= pooled)),
        "width ratio": float(half.mean() / pooled.mean()),
    }


def mean_row(case) -> dict[str, float]:
    replicates, search_sd, seeds = case
    rng = np.random.default_rng([replicates, round(search_sd * 1e4), seeds])
    effects, a = _arm(rng, rng.normal(0.0, SEED_SD, (DRAWS, seeds)), replicates, search_sd)
    truth = 0.5 + (effects.mean(axis=1) if replicates == 1 else 0.0)
    mean, half = crossed_mean(a)
    before = _min_df_mean(a)
    return {
        "covered": float(np.mean(np.abs(mean - truth) <= half)),
        "before covered": float(np.mean(np.abs(mean - truth) <= before)),
        "width ratio": float(half.mean() / before.mean()),
    }


def _where(case) -> str:
    (ra, rb), (sa, sb), seeds = case
    return f"R {ra} vs {rb}, search sd {sa} / {sb}, {seeds} seeds"


def test_the_delta_covers_95_percent_of_simulated_nulls_whatever_each_arms_search_variance_and_replicates():
    low = {_where(c): row["covered"] for c in DELTA_CASES if (row := delta_row(c))["covered"] < GOAL}
    assert not low, f"Δ covered under {GOAL}: {low}"


def test_the_pooled_delta_of_before_fails_when_the_arms_searches_vary_unequally():
    """The check above can fail: the construction it replaced (the arms' replicate variance pooled) undercovers."""
    assert delta_row(((2, 5), (0.03, 0.0), 7))["pooled covered"] < 0.75
    assert delta_row(((3, 3), (0.03, 0.0), 5))["pooled covered"] < GOAL


def test_at_equal_search_variance_and_3_vs_3_replicates_the_delta_is_at_most_1_5_times_as_wide_as_before():
    equal = itertools.product([(3, 3)], [(0.02, 0.02), (0.01, 0.01), (0.0, 0.0)], (5, 6, 7))
    ratios = {_where(c): delta_row(c)["width ratio"] for c in equal}
    assert max(ratios.values()) <= 1.5, ratios


def test_the_replicated_mean_covers_95_percent_and_is_no_wider_than_before():
    rows = {f"R {r}, search sd {sd}, {n} seeds": mean_row((r, sd, n)) for r, sd, n in MEAN_CASES}
    low = {where: row["covered"] for where, row in rows.items() if row["covered"] < GOAL}
    assert not low, f"mean covered under {GOAL}: {low}"
    assert max(row["width ratio"] for row in rows.values()) <= 1.0 + 1e-9
    assert rows["R 2, search sd 0.0, 5 seeds"]["width ratio"] < 0.5  # t at 1 df no longer widens the seeds' part


@pytest.mark.parametrize("case", FAILED_SEED_CASES, ids=_where)
def test_a_failed_seed_leaves_the_common_seeds_and_still_covers(case) -> None:
    """Through the dict functions: replicate 0 of A lost its last seed, so every arm is compared on the others."""
    a, b, truth = _pair(case)
    seeds = a.shape[2]
    truth = np.broadcast_to(truth, (DRAWS,))
    covered = 0
    for d in range(DRAWS):
        x = [dict(enumerate(row)) for row in a[d]]
        del x[0][seeds - 1]
        out = replicated_delta(x, [dict(enumerate(row)) for row in b[d]])
        assert out is not None and out.seeds == seeds - 1
        covered += out.low <= truth[d] <= out.high
    assert covered / DRAWS >= GOAL, f"Δ covered {covered / DRAWS:.3f} at {_where(case)} with a failed seed"


def test_the_dict_functions_are_the_array_functions_on_the_common_seeds():
    a, b, _ = _pair(((2, 5), (0.02, 0.005), 5), draws=20)
    for d in range(20):
        x, y = [dict(enumerate(r)) for r in a[d]], [dict(enumerate(r)) for r in b[d]]
        delta, half = crossed_delta(a[d], b[d])
        assert tuple(replicated_delta(x, y) or ()) == pytest.approx((delta, delta - half, delta + half, 5), abs=1e-15)
        mean, half = crossed_mean(a[d])
        assert tuple(replicated_mean(x) or ()) == pytest.approx((mean, mean - half, mean + half, 5), abs=1e-15)


def _table() -> str:
    lines = ["Δ: replicates A vs B, search sd A / B, seeds: covered (pooled before), width ÷ pooled"]
    for case in DELTA_CASES:
        row = delta_row(case)
        lines.append(f"  {_where(case)}: {row['covered']:.3f} ({row['pooled covered']:.3f}), {row['width ratio']:.2f}")
    lines.append("mean: replicates, search sd, seeds: covered (before), width ÷ before")
    for r, sd, n in MEAN_CASES:
        row = mean_row((r, sd, n))
        lines.append(
            f"  R {r}, sd {sd}, {n} seeds: {row['covered']:.3f} ({row['before covered']:.3f}), {row['width ratio']:.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table())

"""The replicated intervals cover what they say (issue 59, part 0): a simulated null, checked by its coverage.

The model is issue 59's: a value is a replicate's effect (its search's winner; sd 0 or 0.02) plus a seed's effect
shared by every replicate and arm (sd 0.01) plus noise (sd 0.005). Two identical arms: the true Δ is 0. With one
replicate the interval is about the searched configurations (there is no other search to vary over), so its truth is
theirs: their effects' difference, and for the mean the winner's own value. The simulation is seeded: the test is
reproducible, and 1,000 draws put a true 95 % at 93.6 % or more in all but 1 in 10⁴ cases.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from study.final.intervals import replicated_delta, replicated_mean

DRAWS = 1000
GOAL = 0.93


def _arm(rng: np.random.Generator, seed_effect: np.ndarray, replicates: int, search_sd: float):
    effects = rng.normal(0.0, search_sd, replicates)
    values = 0.5 + effects[:, None] + seed_effect[None, :] + rng.normal(0.0, 0.005, (replicates, seed_effect.size))
    return effects, [dict(enumerate(row)) for row in values]


@pytest.mark.parametrize(("replicates", "search_sd"), list(itertools.product((1, 2, 3, 5), (0.0, 0.02))))
def test_the_replicated_intervals_cover_95_percent_of_a_simulated_null(replicates: int, search_sd: float) -> None:
    rng = np.random.default_rng(1000 * replicates + int(search_sd * 1000))
    for seeds in (3, 5, 7):
        covered_delta = covered_mean = 0
        for _ in range(DRAWS):
            seed_effect = rng.normal(0.0, 0.01, seeds)
            effects_a, a = _arm(rng, seed_effect, replicates, search_sd)
            effects_b, b = _arm(rng, seed_effect, replicates, search_sd)
            delta = replicated_delta(a, b)
            mean = replicated_mean(a)
            assert delta is not None and mean is not None
            true_delta = effects_a.mean() - effects_b.mean() if replicates == 1 else 0.0
            true_mean = 0.5 + (effects_a.mean() if replicates == 1 else 0.0)
            covered_delta += delta[1] <= true_delta <= delta[2]
            covered_mean += mean[1] <= true_mean <= mean[2]
        where = f"R {replicates} × {seeds} seeds, search sd {search_sd}"
        assert covered_delta / DRAWS >= GOAL, f"Δ covered {covered_delta / DRAWS:.3f} at {where}"
        assert covered_mean / DRAWS >= GOAL, f"mean covered {covered_mean / DRAWS:.3f} at {where}"

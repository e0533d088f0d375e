"""The sequential rule's decisions, against independent numbers: the crossed interval, Holm's p-values, and hand-made
tables where the right state is known."""

from __future__ import annotations

import numpy as np
import pytest

from dashboards import stats
from study.final import sequential as S
from study.final.intervals import crossed_delta

SEEDS = 5


def _cells(rng: np.random.Generator, means: dict[str, float], replicates: int, search_sd: float = 0.01):
    """Each cell's (replicates, seeds) values on shared seeds."""
    seed_effect = rng.normal(0.0, 0.01, SEEDS)
    return {
        c: mu + rng.normal(0.0, search_sd, (replicates, 1)) + seed_effect + rng.normal(0.0, 0.005, (replicates, SEEDS))
        for c, mu in means.items()
    }


def test_one_look_at_one_comparison_is_the_crossed_95_percent_interval() -> None:
    """m = M and one comparison: no spending, no Holm; better or worse exactly where crossed_delta excludes 0."""
    rule = S.Rule(S.SequentialPlan(3, 3))
    rng = np.random.default_rng(0)
    for _ in range(40):
        cells = _cells(rng, {"a": 0.5 + rng.normal(0, 0.02), "ref": 0.5}, 3)
        delta, half = (float(v) for v in crossed_delta(cells["a"], cells["ref"]))
        out = S.decide(rule, {"a": ("a", "ref")}, cells)["a"]
        expected = S.NOT_DETECTABLE if abs(delta) <= half else (S.BETTER if delta > 0 else S.WORSE)
        assert out.state == expected
        assert (out.low, out.high) == pytest.approx((delta - half, delta + half), abs=1e-12)
        assert out.confidence == pytest.approx(0.95)


def test_holm_at_each_look_matches_the_p_values_step_down() -> None:
    """Three comparisons at one look spending α / 2: decided exactly where Holm's adjusted p-value (from
    dashboards.stats, solved independently) is below α / 2."""
    rule = S.Rule(S.SequentialPlan(3, 4))
    rng = np.random.default_rng(1)
    decided = 0
    for _ in range(80):
        means = {"a": 0.5 + rng.normal(0, 0.03), "b": 0.5 + rng.normal(0, 0.03), "c": 0.5, "ref": 0.5}
        cells = _cells(rng, means, 3)
        comparisons = {k: (k, "ref") for k in "abc"}
        looks = {k: S.Look(cells[k], cells["ref"]) for k in "abc"}
        out = S.decide_round(rule, {}, looks)
        p = []
        for k in "abc":
            delta, parts = S.delta_parts(cells[k], cells["ref"])
            p.append(stats.p_value(float(delta), [stats.Part(np.asarray(x.variance), x.df) for x in parts]))
        adjusted = stats.holm(p)
        for k, q in zip("abc", adjusted, strict=True):
            assert (out[k].state in (S.BETTER, S.WORSE)) == (q < 0.025), (k, q, out[k])
            decided += out[k].state != S.OPEN
        assert set(S.cells_to_continue(out, comparisons)) == (
            {"ref"} | {k for k in "abc" if out[k].is_open} if any(out[k].is_open for k in "abc") else set()
        )
    assert decided > 10  # the check saw decisions, not only open comparisons


def _frozen_table() -> tuple[dict[str, np.ndarray], dict[str, tuple[str, str]]]:
    """Arm ``big`` far above the reference (decided at m = 2), arm ``same`` equal to it (open): the reference's
    third replicate is then made so high that ``big`` judged again at R = 3 would not be better."""
    rng = np.random.default_rng(2)
    cells = _cells(rng, {"big": 0.9, "same": 0.5, "ref": 0.5}, 3, search_sd=0.0)
    cells["big"] = cells["big"][:2]
    cells["ref"][2] += 2.0
    return cells, {"big": ("big", "ref"), "same": ("same", "ref")}


def test_a_frozen_comparison_keeps_its_round_while_the_reference_goes_on_for_another() -> None:
    rule = S.Rule(S.SequentialPlan(2, 4))
    cells, comparisons = _frozen_table()
    first = S.decide(rule, comparisons, {k: v[:2] for k, v in cells.items()})
    assert first["big"].state == S.BETTER and first["big"].round == 2
    assert first["same"].is_open
    assert S.cells_to_continue(first, comparisons) == {"same", "ref"}  # big stops; the reference goes on
    second = S.decide(rule, comparisons, cells)
    assert second["big"] == first["big"]  # not judged again on the reference's third replicate
    assert second["same"].is_open and second["same"].replicates == 3  # the outlier widens the open one
    assert S.cells_to_continue(second, comparisons) == {"same", "ref"}
    delta, half = crossed_delta(cells["big"], cells["ref"])  # what judging ``big`` again would see
    assert not delta - half > 0.0  # not better: only the freeze keeps it


def test_a_round_stopped_halfway_is_not_judged_and_replaying_gives_the_same_decisions() -> None:
    rule = S.Rule(S.SequentialPlan(2, 4))
    cells, comparisons = _frozen_table()
    halfway = {**cells, "same": cells["same"][:2]}  # the reference ran its third replicate, ``same`` not yet
    out = S.decide(rule, comparisons, halfway)
    assert out["same"].is_open and out["same"].replicates == 2
    assert out == S.decide(rule, comparisons, {k: v[:2] for k, v in cells.items()})


def test_an_open_comparison_at_the_last_look_is_not_detectable_with_its_mde() -> None:
    rule = S.Rule(S.SequentialPlan(2, 3))
    rng = np.random.default_rng(3)
    cells = _cells(rng, {"a": 0.5, "ref": 0.5}, 3)
    after_m = S.decide(rule, {"a": ("a", "ref")}, {k: v[:2] for k, v in cells.items()})["a"]
    assert after_m.is_open and after_m.round is None and after_m.text() == "open after 2"
    out = S.decide(rule, {"a": ("a", "ref")}, cells)["a"]
    assert out.state == S.NOT_DETECTABLE and out.round == 3
    _, parts = S.delta_parts(cells["a"], cells["ref"])
    part = [stats.Part(np.asarray(x.variance), x.df) for x in parts]
    assert out.mde == pytest.approx(stats.min_detectable_effect(part, alpha=0.025), rel=1e-9)
    assert out.mde > stats.min_detectable_effect(part)  # the spent α asks more than a fixed design's


def test_equivalence_needs_the_whole_interval_inside_the_margin_and_freezes() -> None:
    rng = np.random.default_rng(4)
    cells = _cells(rng, {"a": 0.5, "ref": 0.5}, 4, search_sd=0.001)
    wide = S.decide(S.Rule(S.SequentialPlan(2, 4), margin=1.0), {"a": ("a", "ref")}, cells)["a"]
    assert wide.state == S.EQUIVALENT and wide.round == 2 and wide.low > -1.0 and wide.high < 1.0
    narrow = S.decide(S.Rule(S.SequentialPlan(2, 4), margin=1e-4), {"a": ("a", "ref")}, cells)["a"]
    assert narrow.state == S.NOT_DETECTABLE


def test_worse_follows_the_metrics_direction() -> None:
    rng = np.random.default_rng(5)
    cells = _cells(rng, {"a": 0.9, "ref": 0.5}, 2, search_sd=0.0)
    up = S.decide(S.Rule(S.SequentialPlan(2, 2)), {"a": ("a", "ref")}, cells)["a"]
    down = S.decide(S.Rule(S.SequentialPlan(2, 2), higher_is_better=False), {"a": ("a", "ref")}, cells)["a"]
    assert (up.state, down.state) == (S.BETTER, S.WORSE)


def test_the_spending_shares_sum_to_alpha_and_bad_plans_are_refused() -> None:
    rule = S.Rule(S.SequentialPlan(2, 5), 0.05, spending=(1, 5, 2.5, 1.5))
    assert sum(rule.level(k) for k in range(4)) == pytest.approx(0.05)
    assert S.Rule(S.SequentialPlan(2, 5)).level(3) == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="2 <= min <= max"):
        S.SequentialPlan(1, 3)
    with pytest.raises(ValueError, match="one positive weight per look"):
        S.Rule(S.SequentialPlan(2, 5), spending=(1.0, 1.0))


def test_the_simulations_vectorised_looks_are_decide_on_each_table() -> None:
    """The simulation (tests/study/final/test_sequential_simulation.py) runs look_states over arrays; decide on each
    table's dicts gives the same final states."""
    from tests.study.final.test_sequential_simulation import _table, simulate

    rule = S.Rule(S.SequentialPlan(2, 5))
    values = _table(5, 0.005, [(0.02, 0.03), (0.005, 0.0)], seed=7)[:60]
    sim = simulate(rule, values)
    comparisons = {1: (1, 0), 2: (2, 0)}
    for t in range(60):
        out = S.decide(rule, comparisons, {c: values[t, c] for c in range(3)})
        assert [S._CODES.index(out[k].state) for k in (1, 2)] == list(sim["states"][t])
        assert [out[k].replicates for k in (1, 2)] == list(2 + sim["last"][t])

"""benchmarks.verdicts' pure parts on synthetic verdicts: agreement over master seeds, false verdicts on A-vs-A, the
cost against design (a), an adaptive design's replicates per cell, and the master seeds' overrides."""

from __future__ import annotations

import math

from benchmarks.verdicts import (
    FINAL_STRIDE,
    OPEN,
    SEARCH_STRIDE,
    TWIN_SHIFT,
    agreement,
    cells_used,
    cost_ratio,
    false_verdicts,
    master_overrides,
)


def test_agreement_counts_identical_verdicts_only() -> None:
    runs = {
        0: {"bspml.p0.4": "better", "bspml.p0.2": OPEN, "spl.p0.2": "better"},
        1: {"bspml.p0.4": "better", "bspml.p0.2": OPEN, "spl.p0.2": OPEN},
        2: {"bspml.p0.4": "better", "bspml.p0.2": OPEN, "spl.p0.2": "better"},
    }
    # bspml.p0.4 agrees (better ×3), bspml.p0.2 agrees (open ×3: open agrees with itself), spl.p0.2 does not.
    assert agreement(runs) == (2, 3)


def test_agreement_a_missing_comparison_disagrees() -> None:
    runs = {0: {"x": "worse", "y": "better"}, 1: {"x": "worse"}}
    assert agreement(runs) == (1, 2)
    assert agreement({}) == (0, 0)


def test_false_verdicts_count_every_decided_one() -> None:
    runs = {
        0: {"ms_twin.p0.2": OPEN, "ms_twin.p0.4": "better"},
        1: {"ms_twin.p0.2": "worse", "ms_twin.p0.4": OPEN},
        2: {"ms_twin.p0.2": OPEN, "ms_twin.p0.4": "equivalent within ±0.01"},
    }
    assert false_verdicts(runs) == (2, 6)


def test_cost_ratio() -> None:
    assert cost_ratio(3 * 588.0, 588.0) == 3.0
    assert math.isnan(cost_ratio(10.0, 0.0))


def test_cells_used_keeps_the_reference_while_any_comparison_is_open() -> None:
    rounds = {
        "bspml.p0.4": ("bspml.p0.4", "ms.p0.4", 2),
        "bspml.p0.2": ("bspml.p0.2", "ms.p0.2", 5),
        "spl.p0.2": ("spl.p0.2", "ms.p0.2", 3),
        "spl.p0.4": ("spl.p0.4", "ms.p0.4", 9),  # more than the maximum: capped at it
    }
    assert cells_used(rounds, 5) == {
        "bspml.p0.4": 2,
        "ms.p0.4": 5,
        "bspml.p0.2": 5,
        "ms.p0.2": 5,
        "spl.p0.2": 3,
        "spl.p0.4": 5,
    }
    # Cost against (b): 25 of 30 cell-replicates.
    assert sum(cells_used(rounds, 5).values()) == 25


def test_master_seeds_draw_apart() -> None:
    assert master_overrides(0) == ["search.sampler.seed=0", "validation.seed=0"]  # today's table, no offset key
    assert master_overrides(2) == [
        f"search.sampler.seed={2 * SEARCH_STRIDE}",
        "validation.seed=2",
        f"final.seed_offset={2 * FINAL_STRIDE}",
    ]
    assert master_overrides(1, twin=True)[0] == f"search.sampler.seed={SEARCH_STRIDE + TWIN_SHIFT}"
    # Sampler seeds of every master, twin and replicate (up to 10) are distinct.
    seeds = [m * SEARCH_STRIDE + t + r for m in range(3) for t in (0, TWIN_SHIFT) for r in range(10)]
    assert len(set(seeds)) == len(seeds)


def test_the_adaptive_design_decides_a_large_effect_early_and_costs_less_than_fixed_r() -> None:
    """(c) replayed over simulated replicates: bspml far better than ms at noise 0.4 is decided before M (at 2
    replicates a replicate part has one degree of freedom, so here at the second look, 3), a null comparison at 0.2
    runs to M; its cost is the replicates its open comparisons needed."""
    import numpy as np

    from benchmarks.verdicts import DESIGNS, TableRun
    from dashboards.compare.cells import Cell

    rng = np.random.default_rng(0)
    seeds, m = range(7), 5
    shared = {s: rng.normal(0, 0.01) for s in seeds}

    def replicates(mean: float) -> list[dict[int, float]]:
        return [
            {s: mean + search + shared[s] + rng.normal(0, 0.005) for s in seeds}
            for search in rng.normal(0, 0.002, size=m)
        ]

    def cell(family: str, ratio: float) -> Cell:
        return Cell(family, "per_class", ratio, "all")

    main = {
        cell("ms", 0.4): replicates(0.50),
        cell("bspml", 0.4): replicates(0.60),
        cell("ms", 0.2): replicates(0.55),
        cell("bspml", 0.2): replicates(0.55),
    }
    twin = {cell("ms", 0.4): replicates(0.50), cell("ms", 0.2): replicates(0.55)}
    run = TableRun(0, main, twin, cell_epochs=10.0, replicates=m)
    adaptive, fixed = DESIGNS["c"].judge(run), DESIGNS["b"].judge(run)
    assert adaptive.main["bspml.per_class_p0.4"] == fixed.main["bspml.per_class_p0.4"] == "better"
    assert adaptive.main["bspml.per_class_p0.2"] == OPEN
    # The 0.4 cells stop at 3 replicates, the 0.2 cells run to 5: (3 + 3 + 5 + 5) of fixed R's 4 × 5 cell-replicates.
    assert adaptive.cost == 10.0 * (3 + 3 + 5 + 5) and fixed.cost == 10.0 * 4 * m

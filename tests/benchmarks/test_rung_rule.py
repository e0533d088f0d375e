"""benchmarks/rung_rule.py's replay of a halving rung on full histories, against hand-computed decisions (no Ray, no
stores): four trials, 4 epochs, one rung at epoch 2 keeping ⌈4/3⌉ = 2."""

from __future__ import annotations

import pytest

from benchmarks.rung_rule import replay_cell

# Trial 0 jumps at epoch 2 then fades; trial 3 dips at epoch 2 but is steadily best; 1 and 2 are middling.
HISTORIES = {
    0: {1: 0.10, 2: 0.60, 3: 0.40, 4: 0.40},
    1: {1: 0.30, 2: 0.35, 3: 0.45, 4: 0.45},
    2: {1: 0.20, 2: 0.30, 3: 0.30, 4: 0.35},
    3: {1: 0.70, 2: 0.34, 3: 0.55, 4: 0.60},
}


def test_the_value_at_the_rung_keeps_the_early_jumper():
    r = replay_cell("c", HISTORIES, "last", first_rung=2, eta=3, epochs=4)
    # Epoch 2: 0 (0.60) and 1 (0.35) go on; the best by its last value, 3, was stopped at its dip.
    assert (r.pick, r.fifo) == (1, 3) and r.regret == pytest.approx(0.15)
    # Rung scores 0.60, 0.35, 0.30, 0.34 against last values 0.40, 0.45, 0.35, 0.60: ranks (4,3,1,2) vs (2,3,1,4),
    # Σ(dx·dy) = 1 over Σdx² = Σdy² = 5: ρ = 0.2.
    assert r.spearman == pytest.approx((0.2,))


def test_the_mean_of_the_last_two_epochs_keeps_the_steady_best():
    r = replay_cell("c", HISTORIES, "mean2", first_rung=2, eta=3, epochs=4)
    # Means 0.35, 0.325, 0.25, 0.52: 3 and 0 go on, and 3 wins as under FIFO.
    assert (r.pick, r.fifo, r.regret) == (3, 3, 0.0)

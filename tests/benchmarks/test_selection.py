"""benchmarks.selection's replay on constructed candidates: each rule's pick, regret, τ and overtuning by hand."""

from __future__ import annotations

import pytest
import yaml

from benchmarks.selection import RACE_RULE, Candidate, cost_ratios, reduced_table, replay
from study.intake.load import load_plan

R1, MAP = "val/recall_at_1", "val/map_at_r"


def _candidate(order: int, r1: list[float], test: float, map_r: list[float] | None = None) -> Candidate:
    history = {R1: dict(enumerate(r1, 1)), MAP: dict(enumerate(map_r or r1, 1))}
    return Candidate(order, history, test)


def test_the_last_epoch_picks_a_lucky_spike_that_the_mean_of_the_last_three_does_not():
    candidates = [
        _candidate(0, [0.50, 0.51, 0.52], test=0.60),  # steady
        _candidate(1, [0.40, 0.41, 0.55], test=0.55),  # a spike at its last epoch
        _candidate(2, [0.30, 0.30, 0.30], test=0.50),
    ]
    picks = {p.rule: p for p in replay(0, "ms", candidates)}
    last, mean3 = picks["last R@1"], picks["mean_last 3 R@1"]
    assert (last.test, last.regret, last.overtuned) == (0.55, pytest.approx(0.05), False)  # the median is 0.55
    assert (mean3.test, mean3.regret) == (0.60, 0.0)
    # τ of the scores with the test scores: last 0.55 > 0.52 > 0.30 against 0.55 < 0.60, 0.50 → one discordant pair
    assert last.tau == pytest.approx(1 / 3) and mean3.tau == pytest.approx(1.0)


def test_ties_go_to_the_earliest_trial_and_a_pick_below_the_median_is_overtuned():
    candidates = [_candidate(0, [0.5], 0.40), _candidate(1, [0.5], 0.70), _candidate(2, [0.4], 0.60)]
    pick = next(p for p in replay(1, "bspml", candidates) if p.rule == "last R@1")
    assert (pick.test, pick.regret, pick.overtuned) == (0.40, pytest.approx(0.30), True)


def test_the_reduced_table_is_the_glyphs_table_at_one_noise_with_two_arms_and_a_valid_spec(tmp_path):
    raw = yaml.safe_load(reduced_table(2, tmp_path, "cosine").read_text())
    assert list(raw["arms"]) == ["ms", "bspml"] and raw["cells"] == {"dataset.noise.ratio": [0.2]}
    assert raw["search"]["sampler"]["seed"] == 2 and raw["search"]["scheduler"] == {"type": "fifo"}
    assert raw["name"] == "sel_cosine_s2" and raw["storage"] == str(tmp_path / "runs")
    assert raw["train"]["lr_schedule"] == {"type": "cosine"} and raw["train"]["epochs"] == 7  # the rest kept
    assert raw["final"]["race"] == {"finalists": 3, "seeds": 2} and raw["final"]["seeds"] == 1
    assert load_plan(tmp_path / "sel_cosine_s2.yaml").name == "sel_cosine_s2"  # a table the product accepts


def test_the_race_is_one_more_pick_scored_over_its_finalists_and_costs_its_runs():
    candidates = [_candidate(0, [0.5], 0.40), _candidate(1, [0.45], 0.70), _candidate(2, [0.4], 0.60)]
    candidates = [Candidate(c.order, c.history, c.test, f"t{c.order}") for c in candidates]
    pick = next(p for p in replay(0, "ms", candidates, raced={"t0": 0.44, "t1": 0.46}) if p.rule == RACE_RULE)
    assert (pick.test, pick.regret, pick.tau) == (0.70, 0.0, pytest.approx(1.0))  # t2 did not race: not ranked
    # 8 holdout trials (0.75 of a model) × 7 epochs; the race 3 × 2 more: 1.75 of the search; with 7 final seeds
    # of 7 epochs (49 model-epochs) the table costs 42 + 49 = 91, the race 31.5 more.
    search, whole = cost_ratios(8, 7, 0.75)
    assert search == pytest.approx(1.75) and whole == pytest.approx((91 + 31.5) / 91)

"""A cell's choice said in one line wherever it is read (study.final.reliability.choice): among the trials that
trained every epoch, or, under an early-stopping scheduler, among the candidates of the last rung that held two or
more, on their scores at that rung; the race winner's reliability once the finalist race chose."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from study.final.reliability import (
    RUNG_RECORDS,
    Bootstrap,
    Candidate,
    Chosen,
    Reliability,
    RungChoice,
    choice,
    of_trials,
    reliability,
)
from trainables.metrics.per_class import PerClass, to_record
from trainables.schema import record as R

EPOCHS = 6


def _record(hits: list[float], counts: list[int] | None = None) -> dict:
    """One fold of len(hits) classes, ``hits`` right of ``counts`` (5 each) queries per class."""
    counts = counts or [5] * len(hits)
    fold = PerClass(classes=list(range(len(hits))), sums=[float(h) for h in hits], counts=counts)
    return {"metric": "recall_at_1", "folds": [to_record(fold)]}


def _score(hits: list[float]) -> float:
    return sum(hits) / (5 * len(hits))


def _exact_p_best(hits: list[list[float]], winner: int) -> float:
    """P(best) over every equally likely draw of the classes with replacement (ties share the credit)."""
    sums = np.asarray(hits, float)
    n = sums.shape[1]
    credit = []
    for draw in itertools.product(range(n), repeat=n):
        s = sums[:, list(draw)].sum(axis=1)
        top = np.abs(s - s.max()) < 1e-12
        credit.append(top[winner] / top.sum())
    return float(np.mean(credit))


def test_trials_that_trained_every_epoch_are_the_candidates():
    hits = [[4, 3, 4], [4, 4, 2], [1, 2, 1]]
    cands = [
        Candidate(i, EPOCHS, {EPOCHS - 1: 0.1 * i, EPOCHS: _score(h)}, {EPOCHS: _record(h)}) for i, h in enumerate(hits)
    ]
    found = choice(cands, "max", EPOCHS)
    assert isinstance(found, Reliability) and found.rung is None and found.n == 3 and found.winner == 0
    assert found.p_best == pytest.approx(_exact_p_best(hits, 0), abs=0.05)
    # Scores 0.0, 0.1, 0.2 at the epoch before, the last scores 11/15, 10/15, 4/15: ranks reversed.
    assert found.stability == pytest.approx(-1.0)


def test_a_halving_cell_without_the_rung_records_says_the_rungs_chose_and_why():
    # 4 trials, η 2: two stop at epoch 2, one at epoch 4; trial 1 trains every epoch.
    cands = [
        Candidate(0, 2, {1: 0.3, 2: 0.4}, {2: _record([2, 2, 2])}),
        Candidate(1, EPOCHS, {2: 0.6, 4: 0.7, EPOCHS: 0.8}, {EPOCHS: _record([4, 4, 4])}),
        Candidate(2, 4, {2: 0.5, 3: 0.5, 4: 0.6}, {4: _record([3, 3, 3])}),
        Candidate(3, 2, {1: 0.2, 2: 0.3}, {2: _record([1, 2, 1])}),
    ]
    found = choice(cands, "max", EPOCHS)
    assert found == RungChoice(4, 2, 1, found.why) and "1 of the candidates trained past epoch 4" in found.why
    assert found.line("bspml.p0.2") == (
        "selection: bspml.p0.2: the rungs chose: 1 of 2 candidates at the rung of epoch 4 trained on; no P(best): "
        f"{found.why}"
    )
    assert found.metrics("c") == {"selection/c/candidates": 2.0, "selection/c/rung_epoch": 4.0}


def test_with_the_rung_records_the_choice_is_bootstrapped_at_that_rung():
    at_rung = [[4, 3, 4], [3, 4, 4], [1, 2, 1]]  # the candidates' hits at epoch 4; trial 1 went on
    cands = [
        Candidate(0, 4, {3: 0.60, 4: _score(at_rung[0])}, {4: _record(at_rung[0])}),
        Candidate(
            1,
            EPOCHS,
            {3: 0.70, 4: _score(at_rung[1]), EPOCHS: 0.9},
            {4: _record(at_rung[1]), EPOCHS: _record([5, 5, 5])},
        ),
        Candidate(2, 4, {3: 0.10, 4: _score(at_rung[2])}, {4: _record(at_rung[2])}),
        Candidate(3, 2, {2: 0.1}, {2: _record([0, 0, 0])}),
    ]
    found = choice(cands, "max", EPOCHS)
    assert isinstance(found, Reliability) and found.rung == 4 and found.n == 3
    # Trial 0 and 1 tie at the rung (11/15): the earlier wins the tie, as the final stage breaks ties.
    assert found.winner == 0
    assert found.p_best == pytest.approx(_exact_p_best(at_rung, 0), abs=0.05)
    assert set(found.tie_set) == {0, 1}
    assert found.stability is not None  # epochs 3 and 4 of the three candidates
    assert "at the rung of epoch 4" in found.line("x") and "rank stability over epochs 3 and 4" in found.line("x")


def test_hedge_keeps_two_to_the_end_so_the_end_is_the_rung():
    cands = [
        Candidate(0, 2, {2: 0.9}, {2: _record([5, 5, 5])}),  # stopped early: not a candidate at the end
        Candidate(1, EPOCHS, {EPOCHS: 0.5}, {EPOCHS: _record([3, 2, 3])}),
        Candidate(2, EPOCHS, {EPOCHS: 0.6}, {EPOCHS: _record([3, 3, 3])}),
    ]
    found = choice(cands, "max", EPOCHS)
    assert isinstance(found, Reliability) and found.rung is None and found.n == 2 and found.winner == 1


def test_no_choice_says_nothing():
    assert choice([Candidate(0, EPOCHS, {EPOCHS: 0.5}, {EPOCHS: _record([1, 2])})], "max", EPOCHS) is None
    assert choice([], "max", EPOCHS) is None


def test_the_race_winner_is_the_chosen_one():
    hits = [[5, 4, 5], [4, 4, 4], [1, 1, 2]]
    cands = [Candidate(10 + i, EPOCHS, {EPOCHS: _score(h)}, {EPOCHS: _record(h)}) for i, h in enumerate(hits)]
    found = choice(cands, "max", EPOCHS, Chosen(11, "race winner"))
    assert isinstance(found, Reliability) and found.winner == 1 and found.chosen == Chosen(11, "race winner")
    assert found.p_best == pytest.approx(_exact_p_best(hits, 1), abs=0.05)
    assert found.line("c").startswith("selection: c: the race winner (trial 11) is ")
    unknown = choice(cands, "max", EPOCHS, Chosen(99, "race winner"))  # not a candidate: the best value chose
    assert isinstance(unknown, Reliability) and unknown.winner == 0 and unknown.chosen is None


def _optuna_trial(
    number: int, state: str, steps: dict[int, float], record: dict | None, **attrs
) -> optuna.trial.FrozenTrial:
    user_attrs = {**attrs, **({R.VAL_PER_CLASS: record} if record else {})}
    trial = optuna.trial.create_trial(
        state=optuna.trial.TrialState[state],
        value=None if state == "FAIL" else steps[max(steps)],
        intermediate_values=steps,
        user_attrs=user_attrs,
    )
    trial.number = number
    return trial


def test_of_trials_reads_optuna_complete_and_pruned_trials():
    trials = [
        _optuna_trial(0, "PRUNED", {1: 0.2, 2: 0.4}, _record([2, 2, 2])),
        _optuna_trial(1, "COMPLETE", {1: 0.3, 2: 0.6, 3: 0.7, EPOCHS: 0.8}, _record([4, 4, 4])),
        _optuna_trial(2, "FAIL", {1: 0.1}, None),
    ]
    found = of_trials(trials, "max", EPOCHS)
    assert isinstance(found, RungChoice) and (found.epoch, found.candidates, found.kept) == (2, 2, 1)
    with_rungs = [
        trials[0],
        _optuna_trial(
            1,
            "COMPLETE",
            {1: 0.3, 2: 0.6, EPOCHS: 0.8},
            _record([4, 4, 4]),
            **{RUNG_RECORDS: {"2": _record([3, 3, 3])}},
        ),
    ]
    found = of_trials(with_rungs, "max", EPOCHS)
    assert isinstance(found, Reliability) and found.rung == 2 and found.winner == 1 and found.p_best == 1.0


def test_spearman_ties_and_constant_input_are_defined():
    from study.final.reliability import spearman

    assert spearman([1.0, 1.0, 2.0], [3.0, 3.0, 4.0]) == pytest.approx(1.0)  # ties: average ranks
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # constant: undefined, not NaN
    assert spearman([1.0, float("nan"), 2.0], [1.0, 2.0, 3.0]) is None
    candidates = [[PerClass(classes=[0, 1], sums=[1.0, 2.0], counts=[3, 3])]] * 3
    assert reliability(candidates, last_two=[(0.1, 0.2)] * 3, bootstrap=Bootstrap(resamples=10)).stability is None

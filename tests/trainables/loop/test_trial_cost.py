"""A trial's cost (issue 42): models × epochs trained and wall seconds, carried through its checkpoint so a restarted
trial goes on counting from its last epoch; no GPU-seconds on a CPU."""

from __future__ import annotations

import pytest

from harness.driver import honest_spec
from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.schema.metric_names import COST_GPU, COST_MODEL_EPOCHS, COST_WALL


def test_a_kfold_trials_cost_counts_every_fold_and_survives_its_checkpoint(tmp_path):
    spec = parse_spec(honest_spec())  # 2 class-disjoint folds of digits
    first = TrialRun.build(spec)
    first.run_epoch()
    first.spent_s = 12.5
    assert first.cost() == {COST_MODEL_EPOCHS: 2.0, COST_WALL: 12.5}  # 2 folds × 1 epoch; CPU: no GPU-seconds
    first.save(tmp_path)
    resumed = TrialRun.build(spec)
    resumed.restore(tmp_path)
    assert resumed.spent_s == pytest.approx(12.5) and COST_GPU not in resumed.cost()
    resumed.run_epoch()
    assert resumed.cost()[COST_MODEL_EPOCHS] == 4.0


def test_a_pass_ended_early_trains_that_many_batches_and_the_next_pass_all_of_them(monkeypatch):
    """``train_epoch(max_batches)``: the calibration's short pass (study/search/calibration.py) against a whole one,
    counted by optimiser steps, with a worker process prefetching batches the short pass leaves behind."""
    spec = parse_spec({**honest_spec(), "train": {**honest_spec()["train"], "batches_per_epoch": 5, "num_workers": 1}})
    member = TrialRun.build(spec).members[0]
    steps = []
    step = member.optimizer.step
    monkeypatch.setattr(member.optimizer, "step", lambda *a, **k: steps.append(1) or step(*a, **k))
    member.train_epoch(max_batches=2)
    assert len(steps) == 2
    member.train_epoch()
    assert len(steps) == 2 + 5

"""Halving with ``train.checkpoint_every`` above 1 (issue 60, item 6): a kept trial resumes from the model that was
ranked at its rung. Before, the rung epoch had no checkpoint, and Ray resumed the paused trial from its last one (here
none): it trained epochs 1, 2, 1, 2, 3 to finish 3, and its bill counted 3. The rule itself (which epochs checkpoint)
is tests/trainables/loop/test_loop.py's unit test; this is the one real run that shows Ray resumes from it.

Read from each trial's ``result.json`` (Ray's record of every report): the MLflow callback logs an epoch once, so its
metric history hides a replay."""

from __future__ import annotations

import json

import pytest

from harness.driver import tiny_spec
from trainables.schema import record as R
from trainables.schema.metric_names import COST_MODEL_EPOCHS, EPOCH

pytestmark = pytest.mark.e2e

NAME, EPOCHS = "t_halving_ckpt", 3


@pytest.mark.usefixtures("on_warm_head")
def test_a_kept_trial_resumes_from_its_rung_checkpoint_with_checkpoint_every_above_one(write_spec, run_cli, tmp_path):
    """2 trials, a rung at epoch 2 that keeps both (η 1.5), so the first to reach it waits there PAUSED whatever the
    timing; ``checkpoint_every: 3``: every trial trains epochs 1, 2, 3 once, and its bill is those 3."""
    spec = tiny_spec(NAME, EPOCHS, num_trials=2, max_concurrent=2, sampler={"type": "random", "seed": 0})
    spec["search"]["scheduler"] = {"type": "halving", "first_rung": 2, "reduction_factor": 1.5}
    spec["train"]["checkpoint_every"] = 3
    proc = run_cli(str(write_spec(spec)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    histories = {}
    for path in (tmp_path / "runs" / NAME / R.SEARCH_EXPERIMENT).glob("trial_*/result.json"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        histories[path.parent.name] = ([r[EPOCH] for r in rows], rows[-1][COST_MODEL_EPOCHS])
    print(histories)
    assert sorted(histories.values()) == [([1, 2, 3], 3.0)] * 2, histories

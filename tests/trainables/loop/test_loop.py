from __future__ import annotations

import numpy as np
import pytest
import torch

from study.intake.spec_reader import parse_spec
from trainables.loop import NonFiniteLossError, TrialRun
from trainables.loop.trainable import checkpoint_epochs
from trainables.schema.errors import DataError
from trainables.schema.metric_names import on_test


def _spec(**train):
    return parse_spec(
        {
            "name": "loop",
            "family": "ms",
            "train": {"epochs": 2, "classes_per_batch": 5, "samples_per_class": 4, "batches_per_epoch": 5, **train},
        }
    )


def test_an_epoch_reports_every_metric():
    metrics = TrialRun.single(_spec()).run_epoch()
    for name in ("epoch", "train/loss", "train/loss/ms", "test/recall_at_1", "test/recall_at_8", "test/nmi"):
        assert name in metrics
    assert "epoch_time_s" in metrics and metrics["epoch"] == 1
    assert 0.0 <= metrics[on_test("recall_at_1")] <= metrics[on_test("recall_at_8")] <= 1.0


def test_checkpoint_round_trip_resumes_exactly(tmp_path):
    spec = _spec()
    first = TrialRun.single(spec)
    first.run_epoch()
    first.save(tmp_path)
    expected = first.run_epoch()

    resumed = TrialRun.single(spec)
    resumed.restore(tmp_path)
    assert resumed.epoch == 1
    again = resumed.run_epoch()
    # Same weights, optimiser state and RNG streams → the same second epoch.
    assert again["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-5)
    assert again[on_test("recall_at_1")] == pytest.approx(expected[on_test("recall_at_1")])
    for a, b in zip(first.member.model.parameters(), resumed.member.model.parameters()):
        torch.testing.assert_close(a, b)


def test_non_finite_loss_fails_the_trial():
    trial = TrialRun.single(_spec(optimizer={"name": "sgd", "lr": 1e38}))
    with pytest.raises(NonFiniteLossError, match="not finite"):
        trial.run_epoch()


def test_non_finite_embeddings_fail_the_trial_as_a_non_finite_loss_does():
    """Weights that diverged after the last finite loss: the evaluation's embeddings are NaN. The same error, so the
    trial is not retried and a table counts it as evaluated (study/search/cell_search.py)."""
    trial = TrialRun.single(_spec())
    with torch.no_grad():
        next(trial.member.model.parameters()).fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="epoch 0: the embeddings are not finite"):
        trial.member.evaluate()


def test_too_many_classes_per_batch_is_a_clear_error():
    with pytest.raises(DataError, match="classes_per_batch=6 exceeds the 5 training classes"):
        TrialRun.single(_spec(classes_per_batch=6))


def test_batches_carry_dataset_indices():
    trial = TrialRun.single(_spec())
    seen = []
    member = trial.member  # the family and the loader of the run's one model
    original = member.family.compute_loss

    def spy(embeddings, batch):
        seen.append((batch.indices.cpu().numpy(), batch.labels.cpu().numpy()))
        return original(embeddings, batch)

    member.family.compute_loss = spy
    member.train_epoch()
    assert len(seen) == 5
    for idx, labels in seen:
        assert np.array_equal(member.data.train.labels[idx], labels)
        assert len(np.unique(labels)) == 5 and np.all(np.bincount(labels) == 4)


def _scheduled(family: str = "ms", **schedule):
    return parse_spec(
        {
            "name": "sched",
            "family": family,
            "train": {
                "epochs": 4,
                "classes_per_batch": 5,
                "samples_per_class": 4,
                "batches_per_epoch": 2,
                "recall_at": [1],
                "optimizer": {"name": "adam", "lr": 1e-3},
                "lr_schedule": schedule,
            },
        }
    )


def test_step_schedule_scales_every_group_and_survives_a_checkpoint(tmp_path):
    spec = _scheduled("margin", type="step", milestones=[2, 3], gamma=0.5)
    trial = TrialRun.single(spec)
    groups = trial.member.optimizer.param_groups
    ratio = groups[1]["lr"] / groups[0]["lr"]  # margin's own β lr
    lrs = [trial.run_epoch()["lr"] for _ in range(2)]
    trial.save(tmp_path)
    resumed = TrialRun.single(spec)
    resumed.restore(tmp_path)
    lrs += [resumed.run_epoch()["lr"] for _ in range(2)]
    assert lrs == pytest.approx([1e-3, 1e-3, 5e-4, 2.5e-4])
    groups = resumed.member.optimizer.param_groups
    assert groups[1]["lr"] / groups[0]["lr"] == pytest.approx(ratio)


def test_cosine_schedule_anneals_to_its_floor_and_none_keeps_the_lr():
    trial = TrialRun.single(_scheduled(type="cosine", min_factor=0.1))
    lrs = [trial.run_epoch()["lr"] for _ in range(4)]
    expected = [1e-3 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * e / 4))) for e in range(4)]
    assert lrs == pytest.approx(expected)
    assert trial.member.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)  # after the last epoch: the floor
    assert TrialRun.single(_scheduled()).run_epoch()["lr"] == pytest.approx(1e-3)


def test_step_schedule_without_milestones_is_a_spec_error():
    from trainables.schema.errors import SpecError

    with pytest.raises(SpecError, match="train.lr_schedule: .*needs milestones"):
        _scheduled(type="step")


def test_the_dataset_cache_is_keyed_on_the_dataset_spec_alone():
    from trainables.data import load_dataset
    from trainables.loop.dataset_cache import cached_dataset
    from trainables.schema.spec import DatasetSpec

    spec = _spec()
    shared = TrialRun.single(spec).full
    assert TrialRun.single(spec.model_copy(update={"seed": 7})).full is shared  # the trial's seed is not the data's
    noisy = DatasetSpec(name="digits", noise={"kind": "uniform", "ratio": 0.2, "seed": 1})
    cached = cached_dataset(noisy)
    assert cached is not shared and cached_dataset(noisy) is cached
    fresh = load_dataset(noisy, seed=0)
    assert np.array_equal(cached.train.labels, fresh.train.labels) and cached.train.noisy_mask.any()


def test_a_checkpoint_from_before_the_extra_state_hook_still_restores():
    """Checkpoints written before the families used torch's extra-state hook kept it under ``family_extra``."""
    spec = _spec().model_copy(update={"family": "bspml"})
    first = TrialRun.single(spec)
    first.run_epoch()
    state = first.member.state()
    family = dict(state["family"])
    old = {**state, "family": family, "family_extra": family.pop("_extra_state")}
    resumed = TrialRun.single(spec)
    resumed.member.load_state(old)
    for key, value in first.member.family.state_dict().items():  # the solver's generator included
        torch.testing.assert_close(resumed.member.family.state_dict()[key], value)


def _schedule(epochs: int, every: int, **scheduler):
    return parse_spec(
        {
            "name": "loop",
            "family": "ms",
            "train": {"epochs": epochs, "checkpoint_every": every},
            "search": {"num_trials": 4, "scheduler": scheduler or {"type": "fifo"}},
        }
    )


def test_every_halving_rung_epoch_checkpoints_whatever_checkpoint_every_says():
    """Halving pauses a trial at each rung and resumes a kept one from its last report's checkpoint: every rung epoch
    (1, 2, 4 of 7 epochs at η 2) checkpoints besides every 3rd and the last; a final trial, FIFO and ASHA (never
    paused) keep the user's setting."""
    halving = _schedule(7, 3, type="halving", first_rung=1, reduction_factor=2)
    assert checkpoint_epochs(halving) == {1, 2, 3, 4, 6, 7}
    assert checkpoint_epochs(halving, final=True) == {3, 6, 7}
    assert checkpoint_epochs(_schedule(7, 3)) == {3, 6, 7}
    assert checkpoint_epochs(_schedule(7, 3, type="asha", grace_period=1, reduction_factor=2)) == {3, 6, 7}
    assert checkpoint_epochs(_schedule(4, 1, type="halving", first_rung=2, reduction_factor=2)) == {1, 2, 3, 4}
    rungs_5_15_45 = _schedule(60, 10, type="halving", first_rung=5, reduction_factor=3)
    assert checkpoint_epochs(rungs_5_15_45) == {5, 10, 15, 20, 30, 40, 45, 50, 60}

"""A restored trial whose checkpoint Ray deleted after its last snapshot (Ray issue 30073) resumes from its newest
checkpoint (:mod:`study.runtime.checkpoint_repair`). Before, ``Tuner.restore`` failed it on every attempt and the study
exited 0 with the trial failed; a replicated study lost a final seed so in CI.

The end-to-end test that makes Ray's window happen on purpose (a study SIGKILLed with a checkpointed trial in flight,
its folder then left as Ray leaves it: :func:`harness.kill_resume.leave_checkpoints_as_ray_does`) is the first stop of
``tests/study/test_resume.py``'s chain; here, the repair on a real Tune trial, without a study."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ray import tune
from ray.train._internal.checkpoint_manager import _TrainingResult
from ray.train._internal.storage import StorageContext
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.experiment import Trial

from study.runtime.checkpoint_repair import checkpoint_after, repair_trial
from trainables.schema import record as R


def _checkpoint(folder: Path, epoch: int | None) -> Path:
    folder.mkdir(parents=True)
    if epoch is not None:
        (folder / R.CHECKPOINT_EPOCH_FILE).write_text(json.dumps({"training_iteration": epoch}))
    return folder


def _trial(root: Path) -> Trial:
    """A real Tune trial whose snapshot names ``checkpoint_000000`` (epoch 1) under ``root/exp/trial_a``."""
    tune.register_trainable("repair_probe", lambda config: None)
    storage = StorageContext(storage_path=str(root), experiment_dir_name="exp", trial_dir_name="trial_a")
    trial = Trial("repair_probe", config={}, storage=storage, trial_id="a")
    trial.placement_group_factory = PlacementGroupFactory([{"CPU": 1}])
    named = _checkpoint(root / "exp/trial_a/checkpoint_000000", 1)
    trial.on_checkpoint(_TrainingResult(tune.Checkpoint.from_directory(str(named)), {"training_iteration": 1}))
    return trial


def test_the_first_later_checkpoint_that_says_its_epoch_is_chosen(tmp_path):
    """The one Ray registered after the deleted one, not a later one the trial wrote whose result Ray never handled."""
    from pyarrow.fs import LocalFileSystem

    fs, trial = LocalFileSystem(), tmp_path / "trial_a"
    assert checkpoint_after(fs, str(trial), 0) is None  # no folder yet
    _checkpoint(trial / "checkpoint_000000", 1)  # not past the deleted one's index
    _checkpoint(trial / "checkpoint_000001", None)  # written before the epoch file: skipped
    (_checkpoint(trial / "checkpoint_000002", None) / R.CHECKPOINT_EPOCH_FILE).write_text('{"training_it')  # torn
    (trial / "checkpoint_000003").write_text("not a folder")
    assert checkpoint_after(fs, str(trial), 0) is None
    _checkpoint(trial / "checkpoint_000010", 5)
    _checkpoint(trial / "checkpoint_000004", 3)
    assert checkpoint_after(fs, str(trial), 0) == (str(trial / "checkpoint_000004"), 4, 3)
    assert checkpoint_after(fs, str(trial), 4) == (str(trial / "checkpoint_000010"), 10, 5)


@pytest.mark.parametrize("newer_epoch", [2, None])
def test_a_trial_whose_checkpoint_is_gone_resumes_from_the_newest_or_from_the_start(tmp_path, newer_epoch):
    trial = _trial(tmp_path)
    assert repair_trial(trial) is None  # its checkpoint is there: nothing to do
    newer = _checkpoint(tmp_path / "exp/trial_a/checkpoint_000001", newer_epoch)
    shutil.rmtree(tmp_path / "exp/trial_a/checkpoint_000000")  # Ray registered the newer one, then the driver died
    said = repair_trial(trial)
    assert said is not None and "checkpoint_000000 is gone" in said
    if newer_epoch is None:  # no checkpoint says its epoch: it trains from its first epoch
        assert trial.checkpoint is None and "no later one says its epoch: it trains again from epoch 1" in said
    else:
        assert trial.checkpoint.path == str(newer) and f"(epoch {newer_epoch})" in said
        assert trial.latest_checkpoint_result.metrics["training_iteration"] == newer_epoch
        assert trial.storage.current_checkpoint_index == 1  # its next checkpoint goes to checkpoint_000002
    assert repair_trial(trial) is None  # repaired: a second look changes nothing

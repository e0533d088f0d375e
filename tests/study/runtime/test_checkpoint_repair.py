"""A restored trial whose checkpoint Ray deleted after its last snapshot (Ray issue 30073) resumes from its newest
checkpoint (:mod:`study.runtime.checkpoint_repair`). Before, ``Tuner.restore`` failed it on every attempt and the study
exited 0 with the trial failed; a replicated study lost a final seed so in CI.

The end-to-end test makes Ray's window happen on purpose: the study is SIGKILLed with a checkpointed trial in flight,
and between the kill and ``--resume`` that trial's folder is left as Ray leaves it when the driver dies after it
registered a newer checkpoint and deleted the older one, but before the snapshot naming the newer one reached the
storage (the checkpoint the snapshot names is gone, a newer one is there)."""

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

from harness.kill_resume import (
    EPOCHS,
    check_resumed,
    kill_spec,
    kill_then_resume,
    snapshot_has_checkpointed_trial_in_flight,
)
from study.runtime.checkpoint_repair import checkpoint_after, repair_trial
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH


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


def _leave_as_ray_does(study_dir: Path) -> list[tuple[str, int]]:
    """Every trial RUNNING in the snapshot, with the checkpoint its snapshot names (epoch e): that checkpoint moved one
    index up, as if Ray had registered a newer one and deleted it (a copy: the newer one holds epoch e, whose result
    MLflow has, as Ray logs a result before it registers its checkpoint). A folder the worker wrote past it, whose
    result the driver never saw, is deleted. Returns (trial id, the epoch it should resume at)."""
    tune_dir = study_dir / R.SEARCH_EXPERIMENT
    state = max(tune_dir.glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
    done = []
    for trial_json, metadata_json in json.loads(state.read_text())["trial_data"]:
        trial, last = json.loads(trial_json), json.loads(metadata_json).get("last_result") or {}
        if trial["status"] != "RUNNING" or not last.get("checkpoint_dir_name"):
            continue
        folder = tune_dir / R.trial_dir(trial["trial_id"])
        named = folder / last["checkpoint_dir_name"]
        newer = named.with_name(f"checkpoint_{int(named.name.split('_')[1]) + 1:06d}")
        for past in folder.glob("checkpoint_*"):
            if past.name > named.name:
                shutil.rmtree(past)
        shutil.copytree(named, newer)
        shutil.rmtree(named)
        done.append((trial["trial_id"], int(last["training_iteration"])))
    return done


@pytest.mark.e2e
def test_a_study_killed_in_rays_window_resumes_the_trial_from_the_checkpoint_that_replaced_it(tmp_path):
    spec = kill_spec(40, "t_repair")
    out = kill_then_resume(
        tmp_path, spec, snapshot_has_checkpointed_trial_in_flight, between=_leave_as_ray_does, status=False
    )
    assert not out["finished_before_kill"] and out["between"], out["first_output"][-2000:]
    check_resumed(out)  # every trial once, none failed, each epoch's metrics once in MLflow
    assert "is gone: it resumes from" in out["resumed"].stderr, out["resumed"].stderr[-3000:]
    for trial_id, epoch in out["between"]:
        rows = [
            json.loads(line)
            for line in (out["study_dir"] / R.SEARCH_EXPERIMENT / R.trial_dir(trial_id) / "result.json")
            .read_text()
            .splitlines()
        ]
        assert all(r["training_iteration"] == r[EPOCH] for r in rows), rows  # Ray's count is the epoch
        restarts = [r["training_iteration"] for r in rows if r["iterations_since_restore"] == 1]
        assert restarts[-1] == epoch + 1 and rows[-1]["training_iteration"] == EPOCHS, rows

"""``train_fn(config)``: the Ray Tune function trainable every loss family runs in.

It parses its config on the first line, resumes from ``tune.get_checkpoint()`` if Ray restarted it, and then, once
per epoch, runs one epoch of its :class:`~trainables.loop.run.TrialRun` and calls ``tune.report(metrics,
checkpoint=...)`` exactly once, so ``training_iteration`` equals the epoch (each checkpoint says its epoch in
:data:`~trainables.schema.record.CHECKPOINT_EPOCH_FILE`, for a driver that must resume it from a newer checkpoint than
Ray's snapshot names). Reporting and checkpointing, nothing else: what an epoch trains and evaluates is
:class:`~trainables.loop.run.TrialRun`'s.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from ray import tune

from trainables.families.registry import family_param_names
from trainables.loop.device import trial_threads
from trainables.loop.member import NonFiniteLossError
from trainables.loop.run import TrialRun
from trainables.schema import record as R
from trainables.schema.spec import StudySpec
from trainables.schema.trial import SPEC_KEY, resolve_trial_spec, sampled_values, trial_stage

__all__ = ["train_fn", "trial_spec", "checkpoint_epochs", "trial_threads", "DELAY_ENV", "DELAY_SEED_ENV", "epoch_delay"]

#: Test-only: each epoch of a trial ends, at random, with a sleep of this many seconds or none, so a test can run the
#: same study under different timings (tests/study/test_reproducible_e2e.py). Unset in every real run.
DELAY_ENV = "DMLSTUDY_TEST_MAX_EPOCH_DELAY_S"
#: Test-only: the seed of those sleeps (default 0), see :func:`epoch_delay`.
DELAY_SEED_ENV = "DMLSTUDY_TEST_EPOCH_DELAY_SEED"


def epoch_delay(sampled: dict[str, Any], epoch: int, delay: float, seed: int = 0) -> float:
    """The test-only sleep (:data:`DELAY_ENV`) at the end of ``epoch`` of the trial that sampled ``sampled``:
    ``delay`` or nothing, each with probability 1/2, drawn from ``seed``, the sampled values and the epoch.

    Half the epochs sleep the whole delay, so trials end out of the order they started in far more often than with a
    delay spread evenly. Seeded, not drawn from the OS: a reproducible study samples the same values in every run, so
    it gets the same sleeps, and a test can tell which trials its seed delays (and so that they ended out of order).
    """
    draw = random.Random(f"{seed}/{sorted(sampled.items())!r}/{epoch}").random()
    return delay if draw < 0.5 else 0.0


def trial_spec(config: dict[str, Any]) -> StudySpec:
    """The trial's spec from its Ray Tune config (the driver checked every range end when the study loaded)."""
    return resolve_trial_spec(config[SPEC_KEY], sampled_values(config), family_param_names)


def checkpoint_epochs(spec: StudySpec, *, final: bool = False) -> frozenset[int]:
    """The epochs whose report carries a checkpoint: every ``train.checkpoint_every``-th, the last, and, for a search
    trial, those its scheduler kind needs whatever ``checkpoint_every`` says
    (:meth:`~trainables.schema.scheduler.SchedulerSpec.checkpoint_epochs`: halving's rungs, where it pauses trials
    and resumes the kept ones from their last checkpoint). A final trial belongs to no cell, and no scheduler pauses
    it.
    """
    epochs, every = spec.train.epochs, spec.train.checkpoint_every
    due = {*range(every, epochs + 1, every), epochs}
    if not final:
        due.update(spec.search.scheduler.checkpoint_epochs(epochs))
    return frozenset(due)


@dataclass(frozen=True)
class _NonFiniteMarker:
    """``R.NONFINITE_MARKER`` in the trial's directory of the study's storage (``<storage>/<name>/tune/trial_<id>``).

    Not in ``tune.get_context().get_trial_dir()``: that is a node-local staging directory, and Ray 2.60 gives a
    fresh actor a different one (``driver_artifacts/``) than an actor reused for the trial's retry
    (``working_dirs/``, ``FunctionTrainable.reset_config``), so a retry never saw the first attempt's marker. The
    storage path is the same for every attempt, on every node, and on any filesystem ``storage`` may name.
    """

    filesystem: Any  # pyarrow.fs.FileSystem
    path: str

    @classmethod
    def of_this_trial(cls) -> _NonFiniteMarker:
        # Ray's DeveloperAPI (public, though its StorageContext may change between minor versions; no private import).
        storage = tune.get_context().get_storage()
        assert storage is not None, "train_fn runs inside a Ray Tune trial"
        return cls(storage.storage_filesystem, f"{storage.trial_fs_path}/{R.NONFINITE_MARKER}")

    def read(self) -> str | None:
        """The first attempt's error, or ``None`` if no attempt of this trial hit a non-finite loss."""
        from pyarrow.fs import FileType

        if self.filesystem.get_file_info(self.path).type == FileType.NotFound:
            return None
        with self.filesystem.open_input_stream(self.path) as stream:
            return stream.read().decode()

    def write(self, reason: str) -> None:
        self.filesystem.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
        with self.filesystem.open_output_stream(self.path) as stream:
            stream.write(reason.encode())


def train_fn(config: dict[str, Any]) -> None:
    """Ray Tune function trainable shared by every loss family."""
    spec = trial_spec(config)
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # one "checkpoint created" line per epoch is noise
    torch.set_num_threads(trial_threads(spec.resources.cpu))
    delay, delay_seed = float(os.environ.get(DELAY_ENV, "0")), int(os.environ.get(DELAY_SEED_ENV, "0"))
    # A reused worker (study.search.driver sets reuse_actors) ran another trial just before: free what that one left in
    # reference cycles (model, optimiser, DataLoader workers) before this one builds its own.
    gc.collect()
    clock = time.perf_counter()  # this attempt's cost starts here: building the data and models is the trial's too
    final = trial_stage(config) == R.STAGE_FINAL
    trial = TrialRun.build(spec, final=final)
    # A NaN is deterministic: a retry (``--max-failures``) would replay the same batches into the same NaN.
    # The marker in the trial's directory makes the retry fail at once instead of retraining.
    marker = _NonFiniteMarker.of_this_trial()
    if (reason := marker.read()) is not None:
        raise NonFiniteLossError(f"not retried: {reason}")
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            trial.restore(Path(directory))
    spent_before = trial.spent_s
    due = checkpoint_epochs(spec, final=final)
    while trial.epoch < spec.train.epochs:
        try:
            metrics = trial.run_epoch()
            if delay > 0:
                time.sleep(epoch_delay(sampled_values(config), trial.epoch, delay, delay_seed))
        except NonFiniteLossError as e:
            marker.write(str(e))
            raise
        trial.spent_s = spent_before + time.perf_counter() - clock
        metrics.update(trial.cost())
        report: dict[str, Any] = {**metrics, **trial.class_record()}
        if trial.epoch not in due:
            tune.report(report)
            continue
        with tempfile.TemporaryDirectory() as directory:
            trial.save(Path(directory))
            (Path(directory) / R.CHECKPOINT_EPOCH_FILE).write_text(json.dumps({"training_iteration": trial.epoch}))
            tune.report(report, checkpoint=tune.Checkpoint.from_directory(directory))

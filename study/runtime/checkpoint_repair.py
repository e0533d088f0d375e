"""A restored trial whose checkpoint Ray has deleted resumes from the checkpoint that replaced it, instead of failing.

Why by hand: Ray keeps one checkpoint per trial (``CheckpointConfig(num_to_keep=1)``, :mod:`study.search.tuners`).
When it registers a trial's new checkpoint, the driver deletes the previous one at once, but the experiment snapshot
that names the new one reaches the storage only later (``_ExperimentCheckpointManager``: forced after a trial's
checkpoint, written on the driver's next step, copied in the background). A driver killed in between leaves a
snapshot naming a checkpoint that is gone. ``Tuner.restore`` then fails that trial on every attempt ("Could not
recover from checkpoint as it does not exist on storage anymore"), and a study counted it failed and exited 0
(measured: tests/study/runtime/test_checkpoint_repair.py without this module). In CI, a replicated study killed
as a final seed finished lost a final seed with exit 0, which is what this window does to a final trial. Ray's
issue ray-project/ray#30073 describes the window. Ray once fell back to the latest available checkpoint (ray#29099); Ray 2.60 has no
such fallback.

:class:`CheckpointRepair` runs on the first step of a restored experiment, before any trial starts. Each unfinished
trial whose checkpoint is gone is pointed at the first later checkpoint in its folder that says its epoch
(:data:`~trainables.schema.record.CHECKPOINT_EPOCH_FILE`, written beside the state by the trainable): the one Ray
registered, which is why it deleted the older one. The trial resumes from there, and Ray counts
``training_iteration`` on from that epoch. A trial with no such checkpoint (one written before the file existed)
trains again from its first epoch: its MLflow run keeps the epochs it logged, and a seeded trial recomputes the same
values.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from ray.tune import Callback

from study.runtime.compat import set_trial_checkpoint, trial_checkpoint_result
from study.runtime.shells import PickledAsDiscarded
from trainables.schema import record as R

__all__ = ["CheckpointRepair", "checkpoint_after", "repair_trial"]

logger = logging.getLogger(__name__)

#: Ray's name of a trial's checkpoint folder: ``checkpoint_<index>``, the index counting up.
_CHECKPOINT_DIR = re.compile(r"checkpoint_(\d+)")
#: Tune's statuses of a trial that will not run again on this restore.
_ENDED = frozenset({"TERMINATED", "ERROR"})


def _exists(filesystem: Any, path: str) -> bool:
    from pyarrow.fs import FileType

    return filesystem.get_file_info(path).type != FileType.NotFound


def checkpoint_after(filesystem: Any, trial_path: str, index: int) -> tuple[str, int, int] | None:
    """The first checkpoint folder under ``trial_path`` (on the ``pyarrow`` ``filesystem``) past Ray's index ``index``
    that holds its epoch file: its path, index and epoch; ``None`` when there is none.

    The first, not the newest: with one checkpoint kept, the folders past a deleted one are the checkpoint Ray
    registered (which deleted it) and any the trial wrote after it whose result the driver never handled. Ray logs a
    result (MLflow's epoch) before it registers its checkpoint, so the registered one continues the run's history
    without a gap."""
    from pyarrow.fs import FileSelector, FileType

    folders = [
        (int(match.group(1)), info.path)
        for info in filesystem.get_file_info(FileSelector(trial_path, allow_not_found=True))
        if info.type == FileType.Directory and (match := _CHECKPOINT_DIR.fullmatch(info.base_name))
    ]
    for found, path in sorted(folders):
        epoch_file = f"{path}/{R.CHECKPOINT_EPOCH_FILE}"
        if found <= index or not _exists(filesystem, epoch_file):
            continue
        try:
            with filesystem.open_input_stream(epoch_file) as stream:
                return path, found, int(json.loads(stream.read().decode())["training_iteration"])
        except (OSError, ValueError, KeyError, TypeError):  # a torn write: the next one
            continue
    return None


def repair_trial(trial: Any) -> str | None:
    """Point ``trial`` (a restored, unfinished Tune ``Trial``) at the checkpoint that replaced the one Ray's snapshot
    names, when that one is gone (:func:`checkpoint_after`); returns what it did, ``None`` when nothing was needed."""
    from ray.tune import Checkpoint

    result = trial_checkpoint_result(trial)
    if result is None or result.checkpoint is None:
        return None
    named = result.checkpoint
    if _exists(named.filesystem, named.path):
        return None
    match = _CHECKPOINT_DIR.fullmatch(named.path.rstrip("/").rsplit("/", 1)[-1])
    after = int(match.group(1)) if match else -1
    found = checkpoint_after(named.filesystem, trial.storage.trial_fs_path, after)
    gone = f"trial {trial.trial_id}: its checkpoint {named.path} is gone"
    if found is None:
        set_trial_checkpoint(trial, None, {})
        return f"{gone} and no later one says its epoch: it trains again from epoch 1"
    path, index, epoch = found
    set_trial_checkpoint(
        trial, Checkpoint(path, named.filesystem), {**result.metrics, "training_iteration": epoch}, index
    )
    return f"{gone}: it resumes from {path} (epoch {epoch})"


class CheckpointRepair(PickledAsDiscarded, Callback):
    """A Tune callback for a restored experiment: on its first step, :func:`repair_trial` for every trial that will run
    again, each repair logged as a one-line warning."""

    def __init__(self) -> None:
        self.checked = False

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        if self.checked:
            return
        self.checked = True
        for trial in trials:
            if trial.status not in _ENDED and (line := repair_trial(trial)) is not None:
                logger.warning(line)

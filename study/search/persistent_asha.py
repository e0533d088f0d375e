"""ASHA whose rungs survive a driver restart: Ray Tune restores a scheduler from the pickle taken at the
study's start, so this one keeps its state in the study directory. Used by :mod:`study.search.tuners`."""

from __future__ import annotations

import pickle
from typing import Any

from ray.tune.schedulers import ASHAScheduler

from study.runtime.compat import asha_trial_info
from study.runtime.storage import read_bytes, write_bytes

__all__ = ["PersistentASHA", "read_state_once"]


def read_state_once(scheduler: Any) -> Any:
    """What ``scheduler`` last wrote to its ``state_file``, the first time it asks (a restored driver's first call),
    else ``None``; sets its ``_loaded``. Shared by :class:`PersistentASHA` and a table's
    :class:`~study.search.cell_asha.CellASHA`."""
    if scheduler._loaded:
        return None
    scheduler._loaded = True
    data = read_bytes(scheduler.state_file)
    return None if data is None else pickle.loads(data)  # noqa: S301 - the scheduler's own file in the study directory


class PersistentASHA(ASHAScheduler):
    """ASHA whose rungs survive a driver restart.

    ``Tuner.restore`` rebuilds the scheduler from the tuner's pickle taken at the study's start, i.e. with
    empty rungs, so a resumed study would promote every trial again. This scheduler writes its state (the
    rungs with every recorded value, and which bracket each live trial is in) after every decision and
    reloads it the first time the restored driver adds a trial.
    """

    def __init__(self, *args: Any, state_file: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state_file = state_file
        self._loaded = False

    def _load_once(self) -> None:
        if (state := read_state_once(self)) is not None:
            self.__dict__.update({**state, "state_file": self.state_file, "_loaded": True})

    def _persist(self) -> None:
        write_bytes(self.state_file, pickle.dumps(self.__dict__))

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        if trial.trial_id not in asha_trial_info(self):  # a restored live trial keeps its bracket
            super().on_trial_add(tune_controller, trial)
            self._persist()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        self._load_once()
        decision = super().on_trial_result(tune_controller, trial, result)
        self._persist()
        return decision

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._load_once()
        if trial.trial_id in asha_trial_info(self):
            super().on_trial_complete(tune_controller, trial, result)
            self._persist()

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        if trial.trial_id in asha_trial_info(self):
            super().on_trial_remove(tune_controller, trial)
            self._persist()

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        asha_trial_info(self).pop(trial.trial_id, None)
        self._persist()

"""The Tune side of :mod:`study.runtime.stopping`: a callback that drains the running trials on a stop signal, then
ends ``Tuner.fit`` through Tune's own interrupt handler (a module of its own: :mod:`study.runtime.stopping` is imported
by the command line before it knows it will need Ray)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ray.tune import Callback

from study.runtime import stopping

__all__ = ["StopOnSignal"]


class StopOnSignal(Callback):
    """A Tune callback: on a stop signal, wait (at most ``drain_timeout_s``) for every trial running at that moment
    to report its next checkpoint, then end ``fit`` through Tune's own interrupt (one last experiment snapshot).

    A trial restores from its latest checkpoint (one per epoch), so draining loses no finished epoch; a trial still
    mid-epoch when the bound passes repeats that epoch after ``--resume`` (its MLflow steps are written once: the
    tracking callback skips epochs it has logged).
    """

    def __init__(self, drain_timeout_s: float) -> None:
        self.drain_timeout_s = drain_timeout_s
        self._tune_handler: Callable[[int, Any], Any] | None = None
        self._waiting: set[str] | None = None
        self._since = 0.0
        self._ended = False

    def setup(self, stop: Any = None, num_samples: Any = None, total_num_samples: Any = None, **info: Any) -> None:
        if not stopping.is_installed() or threading.current_thread() is not threading.main_thread():
            return
        handler = signal.getsignal(signal.SIGUSR1)
        self._tune_handler = handler if callable(handler) else None
        for sig in stopping.SIGNALS:
            signal.signal(sig, stopping.record)

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._tune_handler is None or not stopping.stopping() or self._ended:
            return
        if self._waiting is None:
            self._waiting = {t.trial_id for t in trials if t.status == "RUNNING"}
            self._since = time.monotonic()
            print(
                f"waiting up to {self.drain_timeout_s:.0f} s for {len(self._waiting)} running trial(s) to checkpoint",
                flush=True,
            )
        if not self._waiting or time.monotonic() - self._since > self.drain_timeout_s:
            self._ended = True
            self._tune_handler(signal.SIGUSR1, None)  # Tune's: ends the loop, snapshots the experiment

    def _done(self, trial: Any) -> None:
        if self._waiting is not None:
            self._waiting.discard(trial.trial_id)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

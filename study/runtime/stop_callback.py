"""The Ray side of :mod:`study.runtime.stopping` (a module of its own: :mod:`study.runtime.stopping` is imported by the
command line before it knows it will need Ray).

- :class:`StopOnSignal`, a Tune callback: on a stop signal, drain the running trials, then end ``Tuner.fit`` through
  Tune's own interrupt handler;
- :class:`StageLedger`, a Tune callback: which trials of a stage had ended when ``fit`` returned (the rule for a
  finished stage: :meth:`StageLedger.finished`), and the run's checkpoints and epoch times
  (:class:`~study.runtime.driver_run.RunMeter`);
- :class:`RayLossWatch`: after a stop signal, end the driver with exit 3 when its Ray's GCS goes away (Slurm signals
  every process of a job at once), instead of Ray's minute of waiting for the GCS before it ends the process with 1.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.tune import Callback

from study.runtime import stopping
from study.runtime.compat import (
    spare_failure,
    trial_actor,
    trial_failures,
    tune_asks_without_waiting_while,
    tune_interrupted,
)
from study.runtime.driver_run import RunMeter
from study.runtime.shells import PickledAsDiscarded
from study.runtime.store_errors import chain
from trainables.schema.errors import StoreOutageError

__all__ = ["StopOnSignal", "StageLedger", "RayLossWatch", "ENDED", "caused_by_stop"]

#: Tune's statuses of a trial that has ended: TERMINATED (it trained every epoch, or the scheduler stopped it early)
#: or ERROR. RUNNING, PENDING and PAUSED trials continue on ``--resume``.
ENDED = frozenset({"TERMINATED", "ERROR"})


class StopOnSignal(PickledAsDiscarded, Callback):
    """A Tune callback: on a stop signal, wait (at most :func:`~study.runtime.stopping.drain_bound`) for every trial
    running at that moment to report its next checkpoint, then end ``fit`` through Tune's own interrupt (one last
    experiment snapshot). A second signal ends the wait at once.

    A trial restores from its latest checkpoint (one per epoch), so draining loses no finished epoch; a trial still
    mid-epoch when the bound passes repeats that epoch after ``--resume`` (its MLflow steps are written once: the
    tracking callback skips epochs it has logged).

    A trial whose worker dies during the stop (Slurm signals the workers too) failed because of the stop, not because
    of its configuration: each trial not ended when the signal comes gets one more retry (Tune's ``max_failures``,
    given in the signal's handler, before Tune can see the worker's death), so Tune requeues it from its checkpoint
    (PENDING, continued by ``--resume``) instead of marking it ERROR, and neither Optuna nor MLflow records a failure.
    The retry is taken back at the last step from every trial that did not fail.

    A second signal also ends the running trials' actors (``ray.kill``) once Tune's loop has stopped and its last
    experiment snapshot is taken: Tune's cleanup would otherwise ask each of them to stop after its current ``train``
    step, that is after one more epoch (up to 10 s, Ray's ``_actor_force_cleanup_timeout``), whose result it then
    discards. The snapshot holds each trial's last checkpoint, so the epoch cut short is the only loss, as after any
    kill; ``--resume`` trains it again.

    Once the stop has come, Tune asks its searcher for a next trial without waiting for one
    (:func:`~study.runtime.compat.tune_asks_without_waiting_while`): none comes, and with no trial left running Tune
    would otherwise wait ten minutes before it looks at its interrupt.
    """

    def __init__(self, drain_timeout_s: float) -> None:
        self.drain_timeout_s = drain_timeout_s
        self._tune_handler: Callable[[int, Any], Any] | None = None
        self._waiting: set[str] | None = None
        self._trials: list = []
        self._spared: list[tuple[Any, int]] | None = None
        self._since = 0.0
        self._bound = drain_timeout_s
        self._ended = False
        self._actors: list[Any] | None = None
        self._over = False  # (no Event: Tune pickles its callbacks with the experiment)

    def setup(self, stop: Any = None, num_samples: Any = None, total_num_samples: Any = None, **info: Any) -> None:
        if not stopping.is_installed() or threading.current_thread() is not threading.main_thread():
            return
        handler = signal.getsignal(signal.SIGUSR1)
        self._tune_handler = handler if callable(handler) else None
        for sig in stopping.SIGNALS:
            signal.signal(sig, stopping.record)
        if tune_interrupted(handler):  # SIGUSR1 came while fit was starting, to Tune's handler: ours records it
            stopping.record(signal.SIGUSR1, None)
        stopping.on_stop(self._spare)
        tune_asks_without_waiting_while(stopping.stopping)

    def _spare(self) -> None:
        """One more retry for every trial not ended (once; in the signal's handler, or at the first step after it)."""
        if self._spared is None:
            self._spared = [
                (t, trial_failures(t)) for t in self._trials if t.status not in ENDED and spare_failure(t, 1)
            ]

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        self._trials = trials  # Tune's own list, kept up to date by Tune
        if self._tune_handler is None or not stopping.stopping() or self._ended:
            return
        if self._waiting is None:
            self._spare()
            self._waiting = {t.trial_id for t in trials if t.status == "RUNNING"}
            self._since = time.monotonic()
            self._bound = stopping.drain_bound(self.drain_timeout_s)
            print(
                f"waiting up to {self._bound:.0f} s for {len(self._waiting)} running trial(s) to checkpoint",
                flush=True,
            )
        if not self._waiting or stopping.hurried() or time.monotonic() - self._since > self._bound:
            self._ended = True
            self._tune_handler(signal.SIGUSR1, None)  # Tune's: ends the loop, snapshots the experiment

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if not self._ended:
            return
        if self._spared:  # the loop's last step: Tune snapshots the experiment next
            for trial, failures in self._spared:
                if trial_failures(trial) == failures:
                    spare_failure(trial, -1)
            self._spared = []
        if self._actors is None:  # taken now: Tune's cleanup forgets each actor as it asks it to stop
            self._actors = [a for t in trials if t.status == "RUNNING" and (a := trial_actor(t)) is not None]
            threading.Thread(target=self._end_actors_when_hurried, name="end-trials", daemon=True).start()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._over = True

    def _end_actors_when_hurried(self, poll_s: float = 0.1, longest_s: float = 60.0) -> None:
        """Once a second signal has come (before it, or during Tune's snapshot and cleanup), end the actors of the
        trials that were running at the loop's last step; Tune's cleanup then finds them gone and waits no more."""
        deadline = time.monotonic() + longest_s
        while not stopping.hurried():
            if self._over or time.monotonic() > deadline:
                return
            time.sleep(poll_s)
        for actor in self._actors or []:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as e:  # noqa: BLE001 - an actor already gone; Tune's cleanup ends what is left
                print(f"(could not end a trial's actor: {type(e).__name__})", flush=True)

    def _done(self, trial: Any) -> None:
        if self._waiting is not None:
            self._waiting.discard(trial.trial_id)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)


class StageLedger(PickledAsDiscarded, Callback):
    """A Tune callback that keeps, for the driver, Tune's status of every trial of a stage at the loop's last step
    (once ``fit`` returns, Tune's cleanup has stopped the running trials and calls them TERMINATED too; its last
    experiment snapshot, which ``--resume`` restores, still holds them RUNNING), or at the experiment's end when the
    loop ran no step, and counts the run's checkpoints and epoch times into ``meter``.
    """

    def __init__(self, meter: RunMeter) -> None:
        self.meter = meter
        self.statuses: dict[str, str] = {}
        self._stepped = False

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.statuses = {t.trial_id: t.status for t in trials}
        self._stepped = True

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        # A restored stage whose trials had all ended runs no step; nor does one whose fit was interrupted before its
        # first step. Then no trial was started here, and Tune's cleanup changed no status.
        if not self._stepped:
            self.statuses = {t.trial_id: t.status for t in trials}

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.meter.result(result.get("time_this_iter_s"))

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self.meter.checkpoint()

    def unfinished(self) -> int:
        """Trials that had not ended (RUNNING, PENDING, PAUSED) when the loop stopped."""
        return sum(status not in ENDED for status in self.statuses.values())

    def finished(self, planned: int, errors_replaced: bool = False) -> bool:
        """Whether the stage is done: ``planned`` trials (at least) exist and every one of them ended, TERMINATED (all
        its epochs, or as many as its scheduler allowed) or ERROR.

        ``errors_replaced``: the searcher replaces an errored trial with a new one (a table's cells): after a stop
        signal, a stage with an errored trial then counts as unfinished (its replacement may not have been asked
        yet); ``--resume`` finds out, at the cost of one short run."""
        if len(self.statuses) < planned or self.unfinished():
            return False
        return not (errors_replaced and stopping.stopping() and "ERROR" in self.statuses.values())


class RayLossWatch:
    """After a stop signal, probe Ray's GCS (a TCP connect, every ``every_s``) and, once it has not answered
    ``misses`` times in a row, end the driver: ``closing()`` (the driver's: its MLflow runs KILLED), then
    :func:`~study.runtime.stopping.exit_now` with exit 3 (the driver's last words: its run's progress, how to continue).

    Why: Slurm signals every process of a job at once (preemption, ``scancel``), so the GCS and raylets end with the
    driver's stop. The driver then blocks in its next call to the GCS, and Ray's core worker ends the process with
    exit 1 after ``gcs_rpc_server_reconnect_timeout_s`` (60 s), the runs left RUNNING. What a trial checkpointed and
    Ray's experiment snapshot (at most a second old) are on disk, so ``--resume`` continues as after a killed driver;
    the Optuna trials of the running Ray trials stay RUNNING for the restored searcher to take up.

    The driver :meth:`disarm` s the watch before it shuts Ray down itself; the watch ends the process under the same
    lock, so the two never both close the study.
    """

    def __init__(self, gcs_address: str, every_s: float = 1.0, misses: int = 2) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.every_s = every_s
        self.misses = misses
        #: Called (under the lock) before the process ends; the driver sets it once its parent run exists.
        self.closing: Callable[[], None] | None = None
        self._armed = True
        self._lock = threading.Lock()

    def start(self) -> RayLossWatch:
        threading.Thread(target=self._run, name="ray-loss-watch", daemon=True).start()
        return self

    def disarm(self) -> None:
        """Stop watching (the driver shuts Ray down itself); waits while the watch is ending the process."""
        with self._lock:
            self._armed = False

    def _reachable(self) -> bool:
        try:
            with socket.create_connection(self.address, timeout=self.every_s):
                return True
        except OSError:
            return False

    def _run(self) -> None:
        while not stopping.wait_for_stop(self.every_s):
            if not self._armed:
                return
        missed = 0
        while self._armed:
            missed = 0 if self._reachable() else missed + 1
            if missed >= self.misses:
                host, port = self.address
                self.end(f"Ray's GCS at {host}:{port} went away during the stop")
                return
            time.sleep(self.every_s)

    def end(self, why: str) -> None:
        """End the driver now with exit 3 (``why``: one phrase), unless it was disarmed; from any thread."""
        with self._lock:
            if self._armed:
                self._end(why)

    def _end(self, why: str) -> None:
        print(f"{why}: the driver ends now with what is saved (every checkpoint, Ray's last experiment snapshot)")
        if self.closing is not None:
            # A store that hangs must not keep the driver past the job's KillWait: --resume closes what stays open.
            closer = threading.Thread(target=self._close, daemon=True)
            closer.start()
            closer.join(5.0)
        stopping.exit_now(stopping.EXIT_STOPPED)

    def _close(self) -> None:
        try:
            if self.closing is not None:
                self.closing()
        except Exception as e:  # noqa: BLE001 - one line; the process ends anyway
            print(
                f"warning: the MLflow runs could not be closed ({type(e).__name__}); --resume closes them", flush=True
            )


def caused_by_stop(e: BaseException) -> bool:
    """Whether ``e``, raised after a stop signal, is the stop's own doing rather than a failure of the study: a second
    Ctrl-C (``KeyboardInterrupt``), or Ray's processes ending with the driver's (a ``RayError``: the GCS gone, an
    actor died, ``RaySystemError``; a ``ConnectionError``; a ``TuneError`` caused by them). A store that fails (a full
    disk, an outage past its budget) is the study's failure, stop or not."""
    if not stopping.stopping():
        return False
    from ray.exceptions import RayError
    from ray.tune.error import TuneError

    causes = list(chain(e))
    if any(isinstance(x, StoreOutageError) for x in causes):
        return False
    return any(isinstance(x, (KeyboardInterrupt, RayError, TuneError, ConnectionError)) for x in causes)

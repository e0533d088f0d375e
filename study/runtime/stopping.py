"""Stopping a study on a signal (a batch system's time limit, a preemption) so that ``--resume`` continues it.

Slurm sends ``SIGUSR1`` ahead of a job's time limit (``--signal=B:USR1@SECONDS``, forwarded by the job script) and
``SIGTERM`` on preemption. The driver then stops launching trials, lets the running ones reach their next
checkpoint (at most ``drain_timeout_s``), lets Ray Tune save its experiment state, closes the MLflow runs as KILLED
(never FAILED) and exits with :data:`EXIT_STOPPED`.

Written by hand because the signal can arrive anywhere:

- Inside ``Tuner.fit`` Ray Tune owns ``SIGUSR1`` (``ray/tune/tune.py::_setup_signal_catching`` installs a handler
  that ends the run after one last experiment snapshot) and does not restore ours after ``fit``. :class:`StopOnSignal`,
  a Tune callback, takes that handler at ``setup`` (Tune's controller is built after the handler is installed, in
  the main thread), puts its own in front of it for ``SIGUSR1`` and ``SIGTERM``, and calls Tune's once the running
  trials have checkpointed; :func:`fit_window` puts the driver's own handlers back after ``fit``.
- Outside ``fit`` (connecting Ray, between the search and the final stage, at the end) the handler only records the
  signal; the driver asks :func:`check_stop` at the points where stopping leaves nothing half-written. Raising from
  the handler itself could interrupt an MLflow or Optuna write half-way.

Nothing here is active unless the command line called :func:`install` (``python -m study.run`` does): a study run
from Python, a test or a notebook keeps Python's default signals.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from trainables.schema.errors import StudyError

__all__ = [
    "EXIT_STOPPED",
    "StudyStopped",
    "check_stop",
    "fit_window",
    "install",
    "is_installed",
    "record",
    "received",
    "stopping",
]

#: The exit code of a study stopped on ``SIGUSR1``/``SIGTERM``: nothing is lost; continue it with ``--resume``.
EXIT_STOPPED = 3

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_received: int | None = None
_installed = False
_lock = threading.Lock()


class StudyStopped(StudyError):
    """The driver stopped on a signal at a point where nothing is half-written (exit :data:`EXIT_STOPPED`)."""


def received() -> str | None:
    """The name of the stop signal received so far (``"SIGUSR1"``), or ``None``."""
    return None if _received is None else signal.Signals(_received).name


def stopping() -> bool:
    """Whether a stop signal has arrived: a searcher asked for a new trial answers "not now"."""
    return _received is not None


def is_installed() -> bool:
    """Whether :func:`install` ran: only then does :class:`~study.runtime.stop_callback.StopOnSignal` act."""
    return _installed


def record(signum: int, frame: Any) -> None:
    """The driver's handler: remember the first stop signal and say so once."""
    global _received
    with _lock:
        if _received is None:
            _received = signum
            print(f"{signal.Signals(signum).name} received: stopping the study (continue it with --resume)", flush=True)


def install() -> None:
    """Record ``SIGUSR1`` and ``SIGTERM`` instead of dying on them (the command line's main thread only)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        signal.signal(sig, record)
    _installed = True


def check_stop(where: str) -> None:
    """Raise :class:`StudyStopped` when a stop signal has arrived; ``where`` says what had not started yet."""
    if (name := received()) is not None:
        raise StudyStopped(f"stopped on {name} {where}; nothing is lost: continue the study with --resume")


@contextlib.contextmanager
def fit_window() -> Iterator[None]:
    """Around a ``Tuner.fit``: afterwards the driver's own handlers are back (Tune leaves its ``SIGUSR1`` one)."""
    try:
        yield
    finally:
        if _installed:
            for sig in SIGNALS:
                signal.signal(sig, record)

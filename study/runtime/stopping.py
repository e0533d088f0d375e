"""Stopping a study on a signal (a batch system's time limit, a preemption, Ctrl-C) so that ``--resume`` continues it.

Slurm sends ``SIGUSR1`` ahead of a job's time limit (``--signal=B:USR1@SECONDS``, forwarded by the job script) and
``SIGTERM`` on preemption or ``scancel``, then ``SIGKILL`` after its ``KillWait`` (30 s by default); Ctrl-C and
``timeout`` send ``SIGINT``/``SIGTERM`` to the driver's process group. The driver then stops launching trials, lets
the running ones reach their next checkpoint (at most ``drain_timeout_s`` on ``SIGUSR1``, at most
:data:`URGENT_DRAIN_S` on ``SIGTERM``/``SIGINT``, whose sender waits little), lets Ray Tune save its experiment state,
closes the MLflow runs as KILLED (never FAILED) and exits with :data:`EXIT_STOPPED`. A second signal ends the drain
at once (outside ``Tuner.fit``, a second ``SIGINT`` raises ``KeyboardInterrupt``, which the driver also ends as a
stop). A private local Ray runs in sessions of its own (:func:`study.runtime.compat.own_session_local_instance`), so
a signal to the driver's process group leaves it alive to save the state; where Ray itself is signalled too (Slurm
signals every process of a job), :class:`~study.runtime.stop_callback.RayLossWatch` ends the driver with exit 3
instead of Ray's minute of waiting for its GCS.

Written by hand because the signal can arrive anywhere:

- Inside ``Tuner.fit`` Ray Tune owns ``SIGUSR1`` and ``SIGINT`` (``ray/tune/tune.py::_setup_signal_catching`` installs
  a handler that ends the run after one last experiment snapshot) and does not restore ours after ``fit``.
  :class:`~study.runtime.stop_callback.StopOnSignal`, a Tune callback, takes that handler at ``setup`` (Tune's
  controller is built after the handler is installed, in the main thread), puts its own in front of it for every
  signal of :data:`SIGNALS`, and calls Tune's once the running trials have checkpointed; :func:`fit_window` puts the
  driver's own handlers back after ``fit``.
- Outside ``fit`` (connecting Ray, between the search and the final stage, at the end) the handler only records the
  signal; the driver asks :func:`check_stop` at the points where stopping leaves nothing half-written. Raising from
  the handler itself could interrupt an MLflow or Optuna write half-way.

Nothing here is active unless the command line called :func:`install` (``python -m study.run`` does): a study run
from Python, a test or a notebook keeps Python's default signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from trainables.schema.errors import StudyError

__all__ = [
    "EXIT_STOPPED",
    "SIGNALS",
    "URGENT_DRAIN_S",
    "StudyStopped",
    "check_stop",
    "drain_bound",
    "exit_now",
    "fit_window",
    "hurried",
    "install",
    "is_installed",
    "on_stop",
    "record",
    "received",
    "stopping",
    "wait_for_stop",
]

#: The exit code of a study stopped on a signal: nothing is lost; continue it with ``--resume``.
EXIT_STOPPED = 3

#: The signals that stop a study: a time limit ahead (``SIGUSR1``), a preemption or ``scancel`` (``SIGTERM``), Ctrl-C.
SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
#: The longest drain on ``SIGTERM``/``SIGINT``: Slurm sends ``SIGKILL`` ``KillWait`` (30 s by default) after
#: ``SIGTERM``, and the driver needs some seconds after the drain (Tune's last snapshot, the MLflow runs, Ray's
#: shutdown). ``SIGUSR1`` comes with the lead the job asked for, so it drains up to ``--drain-timeout``.
URGENT_DRAIN_S = 10.0

_received: int | None = None
_repeats = 0
_installed = False
_in_fit = False
_lock = threading.RLock()  # a second signal may interrupt the first one's handler, in the same thread
_event = threading.Event()
_last_words: Callable[[int], None] | None = None
_on_stop: list[Callable[[], None]] = []


class StudyStopped(StudyError):
    """The driver stopped on a signal at a point where nothing is half-written (exit :data:`EXIT_STOPPED`)."""


def received() -> str | None:
    """The name of the stop signal received so far (``"SIGUSR1"``), or ``None``."""
    return None if _received is None else signal.Signals(_received).name


def stopping() -> bool:
    """Whether a stop signal has arrived: a searcher asked for a new trial answers "not now"."""
    return _received is not None


def hurried() -> bool:
    """Whether a second stop signal has arrived: stop without waiting for the running trials."""
    return _repeats > 0


def wait_for_stop(timeout: float | None = None) -> bool:
    """Block (another thread than the main one) until a stop signal arrives or ``timeout`` passes; whether one did."""
    return _event.wait(timeout)


def drain_bound(drain_timeout_s: float) -> float:
    """How long the running trials may take to reach their next checkpoint, for the signal received."""
    if _received in (signal.SIGTERM, signal.SIGINT):
        return min(drain_timeout_s, URGENT_DRAIN_S)
    return drain_timeout_s


def is_installed() -> bool:
    """Whether :func:`install` ran: only then does :class:`~study.runtime.stop_callback.StopOnSignal` act."""
    return _installed


def record(signum: int, frame: Any) -> None:
    """The driver's handler: remember the first stop signal and say so once; a second one hurries the stop (outside
    ``Tuner.fit`` a second ``SIGINT`` raises ``KeyboardInterrupt``, as Ctrl-C pressed twice is meant to)."""
    global _received, _repeats
    name = signal.Signals(signum).name
    with _lock:
        first = _received is None
        if first:
            _received = signum
        else:
            _repeats += 1
    if first:
        for hook in list(_on_stop):
            with contextlib.suppress(Exception):  # a handler must not raise into whatever it interrupted
                hook()
        again = " (Ctrl-C again: stop without waiting for the running trials)" if signum == signal.SIGINT else ""
        _say(f"{name} received: stopping the study{again}")
        _event.set()
        return
    if _repeats == 1:
        _say(f"{_again(name)}: stopping without waiting for the running trials")
    if signum == signal.SIGINT and not _in_fit:
        raise KeyboardInterrupt


def _again(name: str) -> str:
    """``SIGINT received again``, or, when the first signal was another, ``SIGUSR1 received after SIGTERM`` (a job
    script forwards the signal it got to a driver that Slurm may have signalled already)."""
    first = received()
    return f"{name} received again" if first == name else f"{name} received after {first}"


def _say(line: str) -> None:
    """Print ``line`` from a signal handler, which may have interrupted a print (Python refuses a reentrant write to a
    buffered stream: the line then goes straight to file descriptor 1)."""
    try:
        print(line, flush=True)
    except RuntimeError:
        os.write(1, (line + "\n").encode())


def on_stop(hook: Callable[[], None]) -> None:
    """Call ``hook()`` inside the handler of the first stop signal (main thread; quick, writes nothing), until the
    current :func:`fit_window` ends."""
    _on_stop.append(hook)


def install(last_words: Callable[[int], None] | None = None) -> None:
    """Record the :data:`SIGNALS` instead of dying on them (the command line's main thread only).

    ``last_words(code)``: what the driver writes and prints as it exits (its run's progress, the line saying how to
    continue), called by :func:`exit_now` when the driver must leave at once."""
    global _installed, _last_words
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        signal.signal(sig, record)
    # Tune's own SIGINT handler would end a fit at once, without the drain: ours stays (Tune's documented switch).
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    _installed = True
    _last_words = last_words


def check_stop(where: str) -> None:
    """Raise :class:`StudyStopped` when a stop signal has arrived; ``where`` says what had not started yet."""
    if (name := received()) is not None:
        raise StudyStopped(f"stopped on {name} {where}")


def exit_now(code: int = EXIT_STOPPED) -> NoReturn:
    """End the process now, from any thread, with ``code``: the driver's last words (:func:`install`), then
    ``os._exit`` without Python's teardown (whose atexit handlers would wait for a Ray that is gone)."""
    try:
        if _last_words is not None:
            _last_words(code)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@contextlib.contextmanager
def fit_window() -> Iterator[None]:
    """Around a ``Tuner.fit``: inside, a second signal hurries the drain instead of raising; afterwards the driver's
    own handlers are back (Tune leaves its ``SIGUSR1`` and ``SIGINT`` ones)."""
    global _in_fit
    _in_fit = True
    try:
        yield
    finally:
        _in_fit = False
        _on_stop.clear()
        if _installed:
            for sig in SIGNALS:
                signal.signal(sig, record)

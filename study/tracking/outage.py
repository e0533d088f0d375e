"""Riding out a restart or failover of the driver's stores (the Optuna database, the MLflow server) up to a budget.

A shared cluster restarts its database and its tracking server routinely; a study of many GPU-hours must not end
because a store was away for a minute. Every call the driver makes to a store goes through an :class:`OutageGuard`
named after the store: a call that fails because the store cannot be reached (connection refused or reset, the
server shutting down or starting up, a proxy's 502/503/504, MLflow's server reporting its own database's connection
error) is retried with exponential backoff (0.5 s doubling to 10 s) on a fresh connection (SQLAlchemy's
``pool_pre_ping`` drops the pool's dead connections). One line is printed when an outage starts and one when it ends.
An outage longer than ``tracking.outage_budget_s`` ends the study with :class:`~trainables.schema.errors.StoreOutageError`
(exit 1, one line); everything committed is kept and ``--resume`` continues. A guard that gave up retries again once
its store has answered (a later one-call blip is ridden out like the first outage).

Inside Ray Tune's loop (the searcher's ``tell``, the MLflow callback's hooks) the error must end the driver at that
instant, the way a killed driver ends, and not be taken for a trial's failure: Ray catches ``Exception`` around a
trial's completion (and ``OptunaSearch`` swallows a failed ``tell`` as a warning), which would leave the trial RUNNING
in Optuna but done in Ray and MLflow. The Ray-facing methods are therefore wrapped by :func:`through_ray`, which
carries the error past Ray's handlers as :class:`OutageEscape` (a ``BaseException``); :func:`unwrapped` turns it back
into the one-line error where the driver calls ``Tuner.fit``. Ray's last experiment snapshot then predates the failed
write, so ``--resume`` replays it as it replays a driver killed at that moment (nothing lost, nothing twice).

Trials never talk to the stores (the driver is their single writer), so they keep training through an outage: a
trial that reports while the driver waits for a store is held at that report by Ray (a function trainable waits until
the driver takes its result), and its result is written once the store is back. Nothing is dropped.

Why by hand: Optuna retries nothing (``StorageInternalError`` on the first failed commit), MLflow's HTTP client
retries silently for up to ~4 minutes per request and then fails the same way, and SQLAlchemy leaves retrying to the
application. Caveat (documented in docs/notebook/cluster.md): a write whose commit reached the server but whose answer was lost
with the connection is retried, which can duplicate it (a second Optuna trial row, a second MLflow run); a server
restarted with ``pg_ctl -m fast`` or SIGTERM finishes or rolls back what is in flight, so this needs a crash at that
instant.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from study.runtime.store_errors import chain, os_cause
from trainables.schema.errors import StoreOutageError

__all__ = [
    "OutageGuard",
    "OutageEscape",
    "guard",
    "set_budget",
    "is_transient",
    "DEFAULT_BUDGET_S",
    "retrying",
    "through_ray",
    "unwrapped",
]

#: The default of ``tracking.outage_budget_s``.
DEFAULT_BUDGET_S = 300.0

_TRANSIENT_TEXT = re.compile(
    r"connection refused|connection reset|connection aborted|server closed the connection|remotedisconnected"
    r"|terminating connection due to administrator command|the database system is (?:starting up|shutting down"
    r"|in recovery mode|not yet accepting connections)|max retries exceeded|could not connect|connection timed out"
    r"|timeout expired|consuming input failed|ssl syscall error|broken pipe|connection is closed"
    r"|failed to establish a new connection|name or service not known|temporary failure in name resolution"
    r"|502 bad gateway|503 service unavailable|504 gateway timeout|status code 50[234]|response too many 50[234]",
    re.IGNORECASE,
)
#: Exception classes (by name, so no library is imported for the check) that mean "the store could not be reached".
_TRANSIENT_TYPES = frozenset(
    {"ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "ConnectionAbortedError", "BrokenPipeError",
     "DisconnectionError", "NewConnectionError", "ProtocolError", "RemoteDisconnected", "ConnectTimeout", "ReadTimeout"}
)  # fmt: skip

_budget_s = DEFAULT_BUDGET_S
_guards: dict[str, OutageGuard] = {}
_lock = threading.Lock()
_inside = threading.local()  # depth > 0 while this thread is inside a guarded call

T = TypeVar("T")


def set_budget(seconds: float) -> None:
    """The longest outage a store may have before the study ends (the spec's ``tracking.outage_budget_s``)."""
    global _budget_s
    _budget_s = float(seconds)
    for g in _guards.values():
        g.gave_up = False
    logger = logging.getLogger("ray.tune.utils.util")
    if not any(isinstance(f, _QuietSlowWarnings) for f in logger.filters):
        logger.addFilter(_QuietSlowWarnings())


class _QuietSlowWarnings(logging.Filter):
    """Ray Tune warns, in four lines, that a searcher or callback call "took N s, which may be a performance
    bottleneck": during an outage that is the wait already reported in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        recent = any(g.down_since is not None or time.monotonic() - g.back_at < 5.0 for g in _guards.values())
        return not (recent and "performance bottleneck" in record.getMessage())


def is_transient(e: BaseException) -> bool:
    """Whether ``e`` (anywhere in its chain) says the store could not be reached, rather than that the call was wrong
    or the store's disk broke (:mod:`study.runtime.store_errors`)."""
    excs = list(chain(e))
    if any(os_cause(x) for x in excs):
        return False
    return any(type(x).__name__ in _TRANSIENT_TYPES or _TRANSIENT_TEXT.search(str(x)) for x in excs)


def _reason(e: BaseException) -> str:
    for x in chain(e):
        match = _TRANSIENT_TEXT.search(str(x))
        if match:
            return match.group(0).lower()
    return type(e).__name__


class OutageGuard:
    """Retries calls to one store through its outages; shared by every caller of that store in this process."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.down_since: float | None = None
        self.gave_up = False
        self.outages: list[float] = []  # the length of each outage ridden out, for the benchmark and tests
        self.back_at = float("-inf")

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if getattr(_inside, "depth", 0):
            # A guarded call made by a guarded call (Optuna's storage calls its own public methods): the outermost
            # call is the one retried, so an inner success does not end the outage its caller is still in.
            return fn(*args, **kwargs)
        delay = 0.5
        while True:
            _inside.depth = 1
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                if not is_transient(e):
                    raise
                self._failed(e)
                assert self.down_since is not None
                left = _budget_s - (time.monotonic() - self.down_since)
                time.sleep(max(0.0, min(delay, left)))
                delay = min(delay * 2, 10.0)
                continue
            finally:
                _inside.depth = 0
            self._ok()
            return result

    def _failed(self, e: BaseException) -> None:
        now = time.monotonic()
        with _lock:
            if self.down_since is None:
                self.down_since = now
                print(
                    f"warning: {self.store} is unreachable ({_reason(e)}) at {time.strftime('%H:%M:%S')}; retrying for "
                    f"up to {_budget_s:.0f} s (tracking.outage_budget_s); trials wait at their next report",
                    file=sys.stderr,
                    flush=True,
                )
            elif self.gave_up or now - self.down_since >= _budget_s:
                # Once given up, every caller fails at once (each would otherwise wait a budget of its own) until
                # the store answers again (_ok clears it).
                self.gave_up = True
                raise StoreOutageError(
                    f"{self.store} has been unreachable for {now - self.down_since:.0f} s, longer than "
                    f"tracking.outage_budget_s ({_budget_s:.0f} s; last error: {_reason(e)}); everything committed is "
                    "kept: bring it back, then continue with --resume"
                ) from e

    def _ok(self) -> None:
        if self.down_since is None:
            return
        with _lock:
            if self.down_since is None:
                return
            self.gave_up = False  # the store answered: a later outage gets its own budget
            took = time.monotonic() - self.down_since
            self.down_since = None
            self.back_at = time.monotonic()
            self.outages.append(took)
            print(f"{self.store} is back after {took:.1f} s; the study goes on", file=sys.stderr, flush=True)


class OutageEscape(BaseException):  # noqa: N818 - not an error of its own: a carrier past Ray's handlers
    """A :class:`~trainables.schema.errors.StoreOutageError` on its way out of Ray Tune's loop (see the module
    docstring); ``error`` is the one-line error itself."""

    def __init__(self, error: StoreOutageError) -> None:
        super().__init__(str(error))
        self.error = error


def through_ray(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` (a searcher's or callback's method Ray Tune calls) with a store outage past its budget carried past
    Ray's ``except Exception`` handlers as :class:`OutageEscape`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except StoreOutageError as e:
            raise OutageEscape(e) from e

    return wrapper


def unwrapped(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (``Tuner.fit``) with an :class:`OutageEscape` raised as its one-line error."""
    try:
        return fn(*args, **kwargs)
    except OutageEscape as escape:
        raise escape.error from None


def guard(store: str) -> OutageGuard:
    """The guard of ``store`` (a phrase naming it with its redacted URL), one per store and process."""
    with _lock:
        if store not in _guards:
            _guards[store] = OutageGuard(store)
        return _guards[store]


def retrying(store: str, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` with every call guarded by ``store``'s :class:`OutageGuard`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return guard(store).call(fn, *args, **kwargs)

    return wrapper

"""An OS-level failure of the driver's stores (disk full, read-only, permission lost) as the one line the CLI prints.

Such a failure surfaces from deep inside a library, as sqlite's ``database or disk is full`` wrapped by SQLAlchemy
and MLflow or Optuna, or as an ``OSError`` from Ray's experiment snapshot, often re-raised by a cleanup that failed
the same way. Every store writes through transactions (sqlite) or whole files (Ray's snapshot), so what was
committed survives: the remedy is to free space, then ``--resume``. This module finds the cause in the exception's
chain and names the store from the frames that raised it.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Iterator
from types import TracebackType

__all__ = ["store_failure", "quiet_store_failures", "chain", "os_cause"]

#: The errno values of a store the machine, not the study, broke.
_OS_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
}
#: sqlite's messages for the same failures (they reach us as text inside SQLAlchemy's, MLflow's or Optuna's errors).
_SQLITE = re.compile(
    r"database or disk is full|attempt to write a readonly database|unable to open database file|disk I/O error"
    r"|readonly database",
    re.IGNORECASE,
)

#: The same errno values as text, where a library (pyarrow, through Ray) wraps them in a message.
_OS_TEXT = re.compile(r"No space left on device|Disk quota exceeded|Read-only file system")
#: Optuna's words for a failed commit (its storage error carries the SQL error only as its cause).
_OPTUNA_COMMIT = "An exception is raised during the commit"


def chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        # ``cause``: what a Ray task raised, inside the RayTaskError the driver sees.
        todo += [exc.__context__, exc.__cause__, getattr(exc, "cause", None), *getattr(exc, "exceptions", ())]


def _frames(tb: TracebackType | None) -> Iterator[str]:
    while tb is not None:
        yield tb.tb_frame.f_code.co_filename
        tb = tb.tb_next


def os_cause(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno in _OS_ERRNOS:
        return _OS_ERRNOS[exc.errno] + (f": {exc.filename}" if exc.filename else "")
    match = _SQLITE.search(str(exc)) or _OS_TEXT.search(str(exc))
    return match.group(0) if match else None


def store_failure(e: BaseException, stores: dict[str, str]) -> str | None:
    """The one line for ``e`` when an OS-level store failure caused it, else ``None``.

    Args:
        e: what the study raised.
        stores: ``{"mlflow": tracking URI, "optuna": Optuna URL, "storage": the study's directory}``, the stores
            a message may name (redacted URLs: they are printed).
    """
    from trainables.schema.errors import StoreOutageError

    for exc in chain(e):  # a store away longer than its budget (study.tracking.outage) says so itself
        if isinstance(exc, StoreOutageError):
            return str(exc)
    for exc in chain(e):
        cause = os_cause(exc)
        if cause is None:
            continue
        files = list(_frames(exc.__traceback__))
        if any("/optuna/" in f for f in files):
            store = f"the Optuna store {stores['optuna']}"
        elif any("/mlflow/" in f for f in files):
            store = f"the MLflow store {stores['mlflow']}"
        else:
            store = f"the study's storage {stores['storage']}"
        return (
            f"{store} cannot be written ({cause}); what was committed is kept: free space (or restore write "
            "access), then continue with --resume"
        )
    return None


#: Loggers that print a store failure's traceback on its way up (Ray Tune's "Trial task failed", Optuna's and
#: MLflow's SQL errors); the failure still reaches the CLI, which prints its one line.
_NOISY_LOGGERS = (
    "ray.tune.execution.tune_controller",
    "ray.tune.search.optuna.optuna_search",
    "optuna.storages._rdb.storage",
    "mlflow.store.db.utils",
)


class _QuietStoreFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and any(os_cause(e) or type(e).__name__ == "StoreOutageError" for e in chain(exc)):
            return False
        message = record.getMessage()
        return not (_SQLITE.search(message) or _OS_TEXT.search(message) or message.startswith(_OPTUNA_COMMIT))


def quiet_store_failures() -> None:
    """Keep the libraries from printing a store failure's tracebacks (idempotent)."""
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietStoreFailures) for f in logger.filters):
            logger.addFilter(_QuietStoreFailures())

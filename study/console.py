"""A quiet console: the libraries' start-up chatter goes to the study's log file, not the terminal; and the plain
text tables the terminal shows (:func:`format_table`: the live views, ``--status``, the table's report).

Ray, MLflow and Optuna each put a handler on their own logger that writes to the terminal: Ray's token
authentication WARNING, MLflow's "Creating initial MLflow database tables" INFO lines, Optuna's "A new study created
in RDB", and Ray Tune's experiment box on stdout. While a study runs (:func:`library_log`), those loggers write to
``storage/<name>/study.log`` instead (:attr:`~study.intake.layout.StudyLayout.log_file`); what the terminal shows is the
study's own lines and its live table. A library's ERROR keeps one line of ours on stderr, naming the log for the
details. Logging has no per-study redirection of its own, so the swap is written here, and undone on exit.

Until the study's directory exists (a driver refused at its input checks leaves no study behind), lines wait in
memory; a study on ``s3://``/``gs://`` storage gets its log written there when the driver ends. Every line has its
URLs' passwords masked (:func:`study.tracking.credentials.mask_passwords`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

from study.runtime.storage import read_bytes, write_bytes
from study.tracking.credentials import mask_passwords

__all__ = ["LIBRARY_LOGGERS", "StudyLog", "library_log", "format_table", "format_value"]

#: The loggers whose terminal handlers move to the study's log (``alembic``: MLflow's schema migrations).
LIBRARY_LOGGERS = ("ray", "mlflow", "optuna", "alembic")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class StudyLog:
    """Where the libraries' lines go: memory until :meth:`attach`, then the study's log file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._stream: IO[str] | None = None
        self._dropped = False
        self.path: str | None = None

    def write(self, line: str) -> None:
        with self._lock:
            if self._stream is not None:
                try:
                    self._stream.write(line)
                    self._stream.flush()
                except OSError:  # a full or lost disk: the study reports its own store failure; chatter is dropped
                    self._drop()
            elif not self._dropped:
                self._pending.append(line)

    def _drop(self) -> None:
        stream, self._stream, self._dropped = self._stream, None, True
        self._pending.clear()
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()

    def attach(self, path: str) -> None:
        """From now on lines go to ``path`` (appended: a resumed study keeps its earlier log); a remote path is
        written by :meth:`close`."""
        with self._lock:
            self.path = path
            if "://" not in path:
                try:
                    self._stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
                    self._stream.writelines(self._pending)
                    self._stream.flush()
                except OSError:
                    self._drop()
                self._pending.clear()

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                self._drop()
            elif self.path is not None and self._pending:
                with contextlib.suppress(OSError):  # the study's outcome matters more than its chatter
                    earlier = read_bytes(self.path) or b""
                    write_bytes(self.path, earlier + "".join(self._pending).encode())
            self._pending.clear()


class _ToStudyLog(logging.Handler):
    """One library logger's handler: its lines to the study log; an ERROR also one line on stderr."""

    def __init__(self, log: StudyLog) -> None:
        super().__init__()
        self.log = log
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.write(mask_passwords(self.format(record)) + "\n")
            if record.levelno >= logging.ERROR:
                first = mask_passwords(record.getMessage().strip().splitlines()[0] if record.getMessage() else "")
                where = f" (details in {self.log.path})" if self.log.path else ""
                print(f"{record.name.split('.')[0]}: {first}{where}", file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never break the study
            self.handleError(record)


def _is_terminal_handler(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


@contextlib.contextmanager
def library_log() -> Iterator[StudyLog]:
    """Within the block, the libraries' terminal handlers write to the returned :class:`StudyLog`; the caller
    :meth:`~StudyLog.attach`-es it to the study's log file once the study's directory exists."""
    import optuna  # noqa: F401 - each installs its terminal handler on import: swap them now, not after
    import ray  # noqa: F401

    log = StudyLog()
    saved_env = {k: os.environ.get(k) for k in ("MLFLOW_CONFIGURE_LOGGING", "RAY_AIR_NEW_OUTPUT")}
    # MLflow replaces its logger's handlers when it is imported, which may happen during the block (a background
    # preload): told not to, it leaves ours in place.
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"
    # Ray Tune's experiment box and "View detailed results here" lines (stdout, even at verbose=0) come from its
    # new output engine; the legacy one prints nothing at verbose=0. The live table is ours (study.progress).
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    saved = {}
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.level, logger.propagate)
        logger.handlers = [h for h in logger.handlers if not _is_terminal_handler(h)] + [_ToStudyLog(log)]
        logger.propagate = False
        # MLflow's and Optuna's start-up lines are INFO; alembic's INFO is a line per schema migration (80 of them).
        logger.setLevel(logging.WARNING if name == "alembic" else min(logger.level or logging.INFO, logging.INFO))
    try:
        yield log
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        log.close()


def format_value(value: Any) -> str:
    """A table cell: a float to 4 significant digits, anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``rows`` as a plain text table under ``columns`` (the live views' and ``--status``'s; no Ray, no stores)."""
    cells = [[format_value(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])

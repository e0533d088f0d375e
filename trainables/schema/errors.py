"""Exceptions raised by the study orchestration layer.

Every error a user can cause derives from :class:`StudyError`; the CLI turns it into a one-line message
and a non-zero exit code without a traceback.
"""

from __future__ import annotations

__all__ = [
    "StudyError",
    "SpecError",
    "DataError",
    "StudyExistsError",
    "StudyLockedError",
    "StudyStalledError",
    "StoreOutageError",
]


class StudyError(Exception):
    """Base class of every error this package raises on purpose."""


class SpecError(StudyError, ValueError):
    """The study spec or the command line is invalid (exit code 2, nothing started).

    Built from the offending dotted ``key`` and a ``message``; whoever knows where the spec came from adds the
    ``source`` (:meth:`within`), so the one line reads ``<source>: <key>: <message>``.
    """

    def __init__(self, message: str, key: str = "", source: str = "") -> None:
        self.message, self.key, self.source = message, key, source
        super().__init__(": ".join(part for part in (source, key, message) if part))

    def within(self, source: str) -> SpecError:
        """The same error, reported as coming from ``source`` (a file, ``--set``, a trial)."""
        return SpecError(self.message, self.key, source)


class DataError(StudyError, ValueError):
    """A dataset root is missing or not in its official layout (exit code 2)."""


class StudyExistsError(StudyError):
    """A study of that name already exists in the storage and ``--resume`` was not given (exit code 2)."""


class StudyLockedError(StudyError):
    """Another driver holds the study's lock: two drivers must never run one study (exit code 2)."""


class StudyStalledError(StudyError):
    """The study cannot go on: its trials waited longer than ``--pending-timeout`` for resources (exit code 1)."""


class StoreOutageError(StudyStalledError):
    """A store (the Optuna database, the MLflow server) stayed unreachable longer than ``tracking.outage_budget_s``
    (exit code 1; what was committed is kept and ``--resume`` continues)."""

"""Which failures become the one store line (:mod:`study.runtime.store_errors`) and which stay tracebacks."""

from __future__ import annotations

import errno
import logging
import sqlite3

from study.runtime.store_errors import quiet_store_failures, store_failure

STORES = {"mlflow": "sqlite:////s/mlflow.db", "optuna": "sqlite:////s/optuna.db", "storage": "/s"}


def _raised(make):
    try:
        make()
    except Exception as e:  # noqa: BLE001 - the test wants the exception with its traceback
        return e
    raise AssertionError("nothing raised")


def test_a_full_disk_under_a_wrapper_and_a_failed_cleanup_is_found():
    def nested():
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/s/tune/x")
        except OSError as e:
            try:
                raise RuntimeError("TuneError: snapshot failed") from e
            except RuntimeError:
                raise ValueError("cleanup failed too") from None  # context kept, cause suppressed

    line = store_failure(_raised(nested), STORES)
    assert line == (
        "the study's storage /s cannot be written (no space left on the device: /s/tune/x); what was committed is "
        "kept: free space (or restore write access), then continue with --resume"
    )


def test_sqlite_messages_and_read_only_are_store_failures_others_are_not():
    def full():
        raise RuntimeError("wrapped") from sqlite3.OperationalError("database or disk is full")

    assert "(database or disk is full)" in (store_failure(_raised(full), STORES) or "")
    assert "read-only file system" in (store_failure(OSError(errno.EROFS, "x"), STORES) or "")
    assert store_failure(OSError(errno.ENOENT, "no such file"), STORES) is None
    assert store_failure(ValueError("NaN loss"), STORES) is None
    assert store_failure(sqlite3.OperationalError("no such table: runs"), STORES) is None


def test_library_loggers_drop_store_failures_only(caplog):
    quiet_store_failures()
    logger = logging.getLogger("mlflow.store.db.utils")
    with caplog.at_level(logging.ERROR, logger="mlflow.store.db.utils"):
        logger.error("SQLAlchemy database error: %s", sqlite3.OperationalError("database or disk is full"))
        logger.error("an unrelated failure")
    assert [r.getMessage() for r in caplog.records] == ["an unrelated failure"]

"""One driver per study: an exclusive lock held for the driver's whole run.

Two drivers started on the same study (a double click, a retried cron job) would both sample trials into one
Optuna study and one Ray experiment. The lock is ``<storage>/<name>.lock``, beside the study's directory, so a
driver refused at its input checks leaves no study behind; ``flock`` is released by the kernel when a driver
dies, so a killed driver never blocks ``--resume``. Studies on ``s3://``/``gs://`` storage are not locked
(object stores offer no lock); run one driver there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from trainables.schema.errors import SpecError, StudyLockedError

__all__ = ["study_lock", "lock_holder", "driver_text"]


def _lock_path(root: str) -> Path:
    study_dir = Path(root)
    return study_dir.with_name(study_dir.name + ".lock")


def lock_holder(root: str) -> str | None:
    """The pid of the driver holding the lock of the study at ``root``, ``""`` when no driver holds it, ``None`` when
    that cannot be known (object storage: no lock).

    For ``--status``: MLflow says RUNNING both for a live driver and for a killed one, the lock tells them apart.
    The probe takes a shared lock for an instant (it creates nothing); a driver starting in that instant is refused
    as if another held the study, and can simply be started again.
    """
    if "://" in root:
        return None
    try:
        fd = os.open(_lock_path(root), os.O_RDONLY)
    except OSError:  # never started here, or refused before it wrote anything
        return ""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return ""
    finally:
        os.close(fd)


@contextlib.contextmanager
def study_lock(root: str) -> Iterator[None]:
    """Hold the lock of the study whose directory is ``root`` (a local or mounted path).

    Raises :class:`StudyLockedError` when another driver holds it, :class:`SpecError` (``storage``) when the
    storage directory cannot be written.
    """
    if "://" in root:
        yield
        return
    study_dir = Path(root)
    path = _lock_path(root)
    made_parent = not path.parent.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise SpecError(f"cannot write to {path.parent}: {e.strerror}", key="storage") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise StudyLockedError(
                f"study {study_dir.name!r} is being run by another driver (pid {holder}, lock {path}); "
                "wait for it to end, or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            if not study_dir.exists():  # refused before it wrote anything: leave no trace
                path.unlink(missing_ok=True)
                if made_parent:
                    with contextlib.suppress(OSError):  # only if still empty
                        path.parent.rmdir()
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def driver_text(root: str, parent: str | None, complete: bool) -> str | None:
    """What ``--status`` says of a study's (or table's) driver: MLflow's parent run status (``parent``) says RUNNING
    for a live driver and a killed one alike; the study's lock (:func:`lock_holder`) tells them
    apart where there is one (not on object storage). ``None``: nothing to say (never started)."""
    holder = lock_holder(root)
    if holder:
        return f"running (pid {holder})"
    if parent == "RUNNING":
        if holder is None:
            return "running (or killed; if no driver is alive, continue with --resume)"
        return "not running (it was killed or lost): continue with --resume"
    if parent is None:
        return None
    return f"ended {parent}" + ("" if complete else "; continue with --resume")

"""Where a study's files can live: local paths, shared mounts, and pyarrow filesystem URIs (s3://, gs://)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["is_shared_path", "read_bytes", "write_bytes", "make_dirs"]

#: Filesystem types whose files every node of a cluster sees (``/proc/mounts``).
_SHARED_FS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "virtiofs",
    "fuse",
)


def is_shared_path(path: Path) -> bool:
    """Whether ``path`` lies on a network / cluster filesystem, judged by its mount in ``/proc/mounts``."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return False
    path = path.resolve()
    best, fstype = "", ""
    for point, kind in mounts:
        point = point.replace("\\040", " ")
        if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, fstype = point, kind
    return fstype.split(".")[0] in _SHARED_FS


def _fs(path: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the path inside it, for a local path or a URI."""
    import pyarrow.fs

    if "://" in path:
        return pyarrow.fs.FileSystem.from_uri(path)
    return pyarrow.fs.LocalFileSystem(), path


def read_bytes(path: str) -> bytes | None:
    """The file's content, or ``None`` if it does not exist."""
    import pyarrow.fs

    fs, inner = _fs(path)
    if fs.get_file_info(inner).type != pyarrow.fs.FileType.File:
        return None
    with fs.open_input_stream(inner) as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` so a reader never sees half a file (temp + rename where the filesystem renames)."""
    fs, inner = _fs(path)
    tmp = f"{inner}.tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(data)
    fs.move(tmp, inner)


def make_dirs(path: str) -> None:
    fs, inner = _fs(path)
    fs.create_dir(inner, recursive=True)

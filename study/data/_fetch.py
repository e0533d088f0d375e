"""Fetch one dataset into ``--root``: download, verify, extract aside, check the loader's layout, rename into place.

The extracted tree is built in ``ROOT/.fetch-<dataset>-XXXX`` (same filesystem as its final place), checked by the
loader's own driver-side check (:func:`trainables.data.check_dataset`), marked complete, and then moved with one
``rename`` to ``ROOT/<folder>``; on any failure the temporary tree is removed, so ``ROOT`` never holds a half tree.
Downloads live in ``ROOT/.download/`` (``.part`` while incomplete, kept across failures for resume) and are removed
once the tree is in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import tarfile
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from study.data._download import FetchError, download, file_digest, os_error
from trainables.datasets import DatasetEntry, Source, folder_of
from trainables.datasets import entry as dataset_entry
from trainables.schema.errors import DataError
from trainables.schema.spec import DatasetSpec

__all__ = ["MARKER", "FetchResult", "fetch"]

#: Written into the dataset folder before it is renamed into place: its presence means "complete".
MARKER = ".dmlstudy-fetch.json"


@dataclass(frozen=True)
class FetchResult:
    folder: Path
    bytes_downloaded: int
    seconds: float
    download_seconds: float
    already: bool


#: Where a fetch downloads its archives, under the dataset root (removed once empty).
_DOWNLOADS = ".download"


def _checksums(entry: DatasetEntry, sha256: list[str]) -> dict[str, tuple[str, str] | None]:
    """filename → (algorithm, hex): ``--sha256`` (``HEX`` for one-file datasets, else ``FILENAME=HEX``) wins over
    the published md5."""
    sums: dict[str, tuple[str, str] | None] = {
        s.filename: ("md5", s.md5.lower()) if s.md5 else None for s in entry.sources
    }
    for value in sha256:
        name, _, hexdigest = value.rpartition("=")
        if not name:
            if len(entry.sources) != 1:
                names = ", ".join(s.filename for s in entry.sources)
                raise FetchError(f"--sha256 {value}: {entry.name} has several files ({names}); use FILENAME=HEX")
            name = entry.sources[0].filename
        if name not in sums:
            raise FetchError(f"--sha256 {value}: {entry.name} has no file {name!r}")
        if len(hexdigest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in hexdigest):
            raise FetchError(f"--sha256 {value}: expected 64 hex digits")
        sums[name] = ("sha256", hexdigest.lower())
    return sums


def _urls(entry: DatasetEntry, url: str | None) -> dict[str, str]:
    """filename → URL; ``--url`` replaces the archive's URL (one-file datasets) or is the base URL of all files."""
    if url is None:
        return {s.filename: s.url for s in entry.sources}
    if len(entry.sources) == 1:
        return {entry.sources[0].filename: url}
    return {s.filename: url.rstrip("/") + "/" + s.filename for s in entry.sources}


def _verify(path: Path, url: str, expected: tuple[str, str] | None) -> None:
    if expected is None:
        return
    algorithm, want = expected
    got = file_digest(path, algorithm)
    if got != want:
        path.unlink()
        raise FetchError(f"{path.name} from {url} has {algorithm} {got}, expected {want} (deleted; not extracted)")


def _safe_member(name: str) -> bool:
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts


def _extract(source: Source, path: Path, into: Path, target: Path) -> None:
    """Unpack (or copy) one downloaded file into ``into``; a corrupt or truncated archive is a FetchError."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        if source.archive is None:
            shutil.copyfile(path, into / source.filename)
        elif source.archive == "tar":
            with tarfile.open(path) as tar:
                tar.extractall(into, filter="data")  # refuses absolute paths, '..', devices
        else:
            with zipfile.ZipFile(path) as archive:
                bad = next((n for n in archive.namelist() if not _safe_member(n)), None)
                if bad is not None:
                    raise FetchError(f"archive {path.name} holds an unsafe member path {bad!r}")
                archive.extractall(into)
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError) as e:
        path.unlink(missing_ok=True)
        raise FetchError(
            f"archive {path.name} is corrupt or truncated ({type(e).__name__}: {e}); deleted it, run again"
        ) from None
    except OSError as e:
        raise os_error(e, f"{target} (extracting {path.name})") from None


def _check(name: str, folder: Path) -> None:
    """The loader's own driver-side check of ``folder`` (imported here: it loads torch, which the no-op and the
    download failures never need)."""
    from trainables.data import check_dataset

    check_dataset(DatasetSpec(name=name, root=str(folder)))


def _complete(entry: DatasetEntry, root: Path) -> Path | None:
    """The finished folder when a previous fetch (marker) or a hand-made tree the loader reads is already there."""
    folder = root / folder_of(entry.name)
    if (folder / MARKER).exists():
        return folder
    if folder.exists():
        try:
            _check(entry.name, folder)
        except DataError as e:
            raise FetchError(f"{folder} exists but is not a complete {entry.name} tree ({e}); move it away") from None
        return folder
    return None


def fetch(name: str, root: Path, *, url: str | None = None, sha256: list[str] | None = None) -> FetchResult:
    """Fetch dataset ``name`` into ``root`` (see the module docstring); raises :class:`FetchError`.

    One fetch of a dataset per root at a time: a second one (another shell, another node on a shared root) is
    refused while ``.download/<dataset>.lock`` is held (``flock``: released by the kernel if the fetch dies)."""
    start = time.monotonic()
    entry = dataset_entry(name)
    sums, urls = _checksums(entry, sha256 or []), _urls(entry, url)
    root = root.expanduser().absolute()
    done = _complete(entry, root)
    if done is not None:
        return FetchResult(done, 0, time.monotonic() - start, 0.0, already=True)
    downloads = root / _DOWNLOADS
    lock_path = downloads / f"{name}.lock"
    try:
        downloads.mkdir(parents=True, exist_ok=True)
        lock = lock_path.open("a")
    except OSError as e:
        raise os_error(e, downloads) from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FetchError(f"another fetch of {name} into {root} is running ({lock_path} is locked)") from None
        done = _complete(entry, root)  # the fetch that held the lock may have finished it
        if done is not None:
            return FetchResult(done, 0, time.monotonic() - start, 0.0, already=True)
        try:
            result = _fetch_locked(entry, root, sums, urls, start)
        finally:
            # Removed while held, so no lock file is left behind; a fetch that opened it in the instant before can
            # still lock the removed file and then finds the tree complete (or fetches beside a third): accepted.
            lock_path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # another dataset's download is in there
        downloads.rmdir()
    return result


def _fetch_locked(
    entry: DatasetEntry, root: Path, sums: dict[str, tuple[str, str] | None], urls: dict[str, str], start: float
) -> FetchResult:
    """Download (into ``root/.download``), verify and unpack ``entry``'s files, with :func:`fetch`'s lock held."""
    name = entry.name
    downloads = root / _DOWNLOADS
    fetched = 0
    paths = {}
    download_start = time.monotonic()
    for source in entry.sources:
        path = downloads / source.filename
        if not path.exists():
            fetched += download(urls[source.filename], path)
        _verify(path, urls[source.filename], sums[source.filename])
        paths[source.filename] = path
    download_seconds = time.monotonic() - download_start
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".fetch-{name}-", dir=root))
    except OSError as e:
        raise os_error(e, root) from None
    try:
        for source in entry.sources:
            _extract(source, paths[source.filename], tmp / source.into, root / folder_of(entry.name))
        built = tmp / folder_of(entry.name)
        try:
            _check(name, built)
        except DataError as e:
            raise FetchError(
                f"the archive from {urls[entry.sources[0].filename]} does not hold the layout "
                f"the {name} loader reads: {e}"
            ) from None
        record = {"dataset": name, "files": [{"url": urls[f], "checksum": sums[f]} for f in urls]}
        try:
            (built / MARKER).write_text(json.dumps(record, indent=1) + "\n")
            built.rename(root / folder_of(entry.name))
        except OSError as e:
            raise os_error(e, root / folder_of(entry.name)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for path in paths.values():
        path.unlink(missing_ok=True)
    return FetchResult(root / folder_of(entry.name), fetched, time.monotonic() - start, download_seconds, already=False)

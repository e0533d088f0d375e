"""HTTP download with resume (``Range`` into a ``.part`` file), a progress bar on stderr and a checksum.

Hand-written on ``urllib`` rather than torchvision's ``download_url``: that one restarts from zero after a
dropped connection (SOP and CUB are 1-3 GB), prints to stdout and raises on a bad checksum only after renaming the
file into place. Every failure here is a :class:`FetchError` whose message is one line naming the URL or file.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from trainables.schema.errors import StudyError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["FetchError", "download", "file_digest", "os_error"]

_CHUNK = 1 << 20
_TIMEOUT_S = 60.0


class FetchError(StudyError):
    """A fetch failed; the message is the one line the command prints."""


def os_error(e: OSError, path: object) -> FetchError:
    """An ``OSError`` as one line; a full disk is named as such (ENOSPC)."""
    if e.errno == errno.ENOSPC:
        return FetchError(f"disk full writing {path} (ENOSPC)")
    return FetchError(f"cannot write {path}: {e.strerror or e}")


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class _Progress:
    """``name  42% 12.0/28.6 MB  3.1 MB/s`` rewritten in place on stderr; silent when stderr is not a terminal
    (so a failure's stderr is exactly its one line in scripts and tests)."""

    def __init__(self, name: str, done: int, total: int | None) -> None:
        self.name, self.done, self.total = name, done, total
        self.start, self.start_bytes, self.last = time.monotonic(), done, 0.0
        self.enabled = sys.stderr.isatty()

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self.last > 0.2:
            self.last = now
            rate = (self.done - self.start_bytes) / max(now - self.start, 1e-9) / 1e6
            share = f"{100 * self.done / self.total:3.0f}% " if self.total else ""
            total = f"/{self.total / 1e6:.1f}" if self.total else ""
            sys.stderr.write(f"\r{self.name}  {share}{self.done / 1e6:.1f}{total} MB  {rate:.1f} MB/s ")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def download(url: str, dest: Path) -> int:
    """Download ``url`` to ``dest`` (via ``dest.part``, resumed with ``Range`` when it exists); bytes fetched now.

    A server that ignores ``Range`` (200) restarts the file; 416 on a resume means the ``.part`` is already
    whole. A connection that drops keeps the ``.part`` so the same command continues where it stopped.
    """
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "dmlstudy-fetch"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT_S)  # noqa: S310 (http(s) URLs from the catalog)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:
            part.replace(dest)
            return 0
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot reach {url}: {reason}") from None
    with response:
        if response.headers.get_content_type() == "text/html":  # a login, consent or "virus scan" page, not a file
            raise FetchError(
                f"{url} answered with an HTML page instead of {dest.name} (a login or confirmation page?); "
                "download it in a browser and pass its URL with --url, or see docs/notebook/data.md"
            )
        resumed = have > 0 and response.status == 206
        if not resumed:
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        progress = _Progress(dest.name, have, total)
        got = 0
        try:
            with part.open("ab" if resumed else "wb") as f:
                while True:
                    try:
                        chunk = response.read(_CHUNK)
                    except (http.client.IncompleteRead, OSError) as e:
                        if isinstance(e, http.client.IncompleteRead):
                            f.write(e.partial)
                            got += len(e.partial)
                        break
                    if not chunk:
                        break
                    f.write(chunk)
                    got += len(chunk)
                    progress.update(len(chunk))
        except OSError as e:
            raise os_error(e, part) from None
        finally:
            progress.close()
    if total is not None and have + got < total:
        raise FetchError(
            f"{url}: connection dropped after {have + got} of {total} bytes; "
            f"run the same command again to resume ({part} is kept)"
        )
    part.replace(dest)
    return got

"""``dataset.cache: decoded``: every image decoded and resized once per node, shared read-only by its trials.

Why: the PIL pipeline decodes and resizes the same JPEG in every epoch, fold, trial and final seed (≈ 290 images/s
per core on CUB-sized photos), so a GPU would wait on the CPU. Here each image of a dataset is decoded and
its shorter side resized to ``resize`` exactly as :func:`~trainables.data.transforms.train_transform` does before
its crop (the same :class:`ImageFile` + ``v2.Resize`` call, so the same pixels), and stored as uint8 HWC in one file
per dataset and size. Trials open it with ``np.memmap``: the node's page cache holds one copy for every process.

File layout (all little-endian)::

    [0, HEADER)        magic "DMLDEC01", then a JSON header (fingerprint, counts, sizes), zero padded
    [HEADER, +data)    the images' uint8 pixels, HWC, back to back (no padding: SOP's shapes vary a lot, and
                       padding every image to the widest box would store far more zeros than pixels)
    index              shapes int32 (n, 2) = (h, w); offsets int64 (n + 1); crc32 of every BLOCK of the data
    trailer            magic "DMLDONE1", index offset, data bytes, crc32 of header + index  -- written last

A file is used only when its trailer is present and consistent, its header's fingerprint (format version, resize
size, every file's relative path, size and mtime) matches the files on disk now, and the sampled data blocks match
their checksums; otherwise it is rebuilt. A build writes a private temporary file and renames it into place under an
``fcntl`` lock, so concurrent trials on a node build once and readers never see half a file. Checking every block at
every open would read the whole file (SOP: 12 GB at ≈ 0.9 GB/s crc32); each open checks :data:`SAMPLED_BLOCKS` blocks
at random plus the first and last, and :meth:`DecodedImages.verify` checks them all.

The cache directory is ``dataset.cache_dir``, else ``$DMLSTUDY_CACHE_DIR``, else ``<system temp>/dmlstudy-cache-<uid>``:
node-local by default and never under the study storage, so it is not part of a checkpoint or of MLflow.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainables.data.image_file import ImageFile
from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CACHE_DIR_ENV", "DecodedImages", "default_cache_dir", "FORMAT_VERSION"]

FORMAT_VERSION = 1
CACHE_DIR_ENV = "DMLSTUDY_CACHE_DIR"
MAGIC = b"DMLDEC01"
DONE = b"DMLDONE1"
HEADER = 1 << 16
TRAILER = 32
BLOCK = 1 << 20
#: Data blocks checked at every open (besides the first and the last).
SAMPLED_BLOCKS = 32


def default_cache_dir() -> Path:
    """``$DMLSTUDY_CACHE_DIR``, else a per-user directory under the system temp dir (node-local)."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / f"dmlstudy-cache-{os.getuid()}"


@dataclass(frozen=True)
class _Opened:
    pixels: np.ndarray  # a slice of the np.memmap of the file
    shapes: np.ndarray
    offsets: np.ndarray
    row: dict[str, int]


#: The cache files this process opened, by path (a DataLoader worker forked later inherits the mapping).
_OPENED: dict[str, _Opened] = {}


@dataclass(frozen=True)
class DecodedImages:
    """The decoded images of ``items`` (paths relative to ``root``), resized to ``resize``; ``load_item`` of a
    cached split: ``self(relpath)`` is the stored uint8 ``(h, w, 3)`` array (a read-only view of the mapping).

    Picklable (only paths and names travel); each process maps the file on first use, building it if needed.
    """

    dataset: str
    root: str
    items: tuple[str, ...]
    resize: int
    directory: str

    @functools.cached_property
    def path(self) -> Path:
        key = hashlib.sha256(json.dumps([self.root, self.items]).encode()).hexdigest()[:16]
        return Path(self.directory) / f"{self.dataset}-{key}-r{self.resize}.u8"

    def __call__(self, relpath: object) -> np.ndarray:
        opened = _OPENED.get(str(self.path)) or self.ensure()
        i = opened.row[str(relpath)]
        h, w = opened.shapes[i]
        return opened.pixels[opened.offsets[i] : opened.offsets[i + 1]].reshape(h, w, 3)

    # ------------------------------------------------------------------------------------------ open/build

    def fingerprint(self) -> str:
        """Hash of what the stored pixels depend on: format, resize size, and each file's path, size and mtime."""
        h = hashlib.sha256(f"{FORMAT_VERSION} {self.resize} {self.root}\n".encode())
        for rel in self.items:
            path = os.path.join(self.root, rel)
            try:
                st = os.stat(path)
            except OSError as e:
                raise DataError(f"cannot read image {path}: {e}") from None
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def ensure(self) -> _Opened:
        """Map the cache file, first building it (under the node's lock) when it is missing, stale or corrupt."""
        key = str(self.path)
        if key in _OPENED:
            return _OPENED[key]
        fingerprint = self.fingerprint()
        opened = _open(self.path, fingerprint, self.items)
        if opened is None:
            try:
                with _locked(self.path):
                    opened = _open(self.path, fingerprint, self.items)  # another process may have built it meanwhile
                    if opened is None:
                        self.build(fingerprint)
                        opened = _open(self.path, fingerprint, self.items)
            except OSError as e:
                raise DataError(
                    f"dataset.cache_dir {self.directory}: cannot write the decoded image cache ({e}); "
                    f"set dataset.cache_dir or ${CACHE_DIR_ENV} to a writable node-local directory, "
                    "or dataset.cache: none"
                ) from None
            assert opened is not None, f"the cache file just built does not check: {self.path}"
        _OPENED[key] = opened
        return opened

    def build(self, fingerprint: str, workers: int | None = None) -> None:
        """Decode, resize and write every item to a temporary file, then rename it into place."""
        from torchvision.transforms import v2

        load, resize = ImageFile(self.root, self.resize), v2.Resize(self.resize)

        def decode(rel: str) -> np.ndarray:
            return np.ascontiguousarray(np.asarray(resize(load(rel)), dtype=np.uint8))

        self.path.parent.mkdir(parents=True, exist_ok=True)
        n = len(self.items)
        shapes = np.zeros((n, 2), np.int32)
        offsets = np.zeros(n + 1, np.int64)
        block_crcs: list[int] = []
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f, ThreadPoolExecutor(workers or _cpu_count()) as pool:
                f.write(b"\0" * HEADER)
                pending = bytearray()
                for i, img in enumerate(pool.map(decode, self.items)):  # PIL decodes and resizes without the GIL
                    shapes[i] = img.shape[:2]
                    offsets[i + 1] = offsets[i] + img.size
                    data = img.tobytes()
                    f.write(data)
                    pending += data
                    while len(pending) >= BLOCK:
                        block_crcs.append(zlib.crc32(memoryview(pending)[:BLOCK]))
                        del pending[:BLOCK]
                if pending:
                    block_crcs.append(zlib.crc32(pending))
                index = shapes.tobytes() + offsets.tobytes() + np.asarray(block_crcs, np.uint32).tobytes()
                header = _header(fingerprint, self, int(offsets[-1]), len(block_crcs))
                f.write(index)
                f.write(DONE + np.asarray([HEADER + offsets[-1], offsets[-1]], np.int64).tobytes())
                f.write(np.asarray([zlib.crc32(header + index), 0], np.uint32).tobytes())
                f.seek(0)
                f.write(header)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def verify(self) -> bool:
        """Whether every data block of the file on disk matches its checksum (reads the whole file)."""
        return _open(self.path, self.fingerprint(), self.items, sample=None) is not None


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _header(fingerprint: str, images: DecodedImages, data_bytes: int, n_blocks: int) -> bytes:
    meta = {
        "version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "dataset": images.dataset,
        "resize": images.resize,
        "count": len(images.items),
        "data_bytes": data_bytes,
        "blocks": n_blocks,
    }
    raw = MAGIC + json.dumps(meta).encode()
    assert len(raw) <= HEADER
    return raw + b"\0" * (HEADER - len(raw))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _open(path: Path, fingerprint: str, items: tuple[str, ...], sample: int | None = SAMPLED_BLOCKS) -> _Opened | None:
    """The mapped file if it is complete, current and its checked blocks match; ``None`` means rebuild."""
    try:
        size = path.stat().st_size
        if size < HEADER + TRAILER:
            return None
        raw = np.memmap(path, np.uint8, mode="r")
    except (OSError, ValueError):
        return None
    header = bytes(raw[:HEADER])
    if not header.startswith(MAGIC):
        return None
    try:
        meta = json.loads(header[len(MAGIC) :].rstrip(b"\0"))
    except ValueError:
        return None
    n, data_bytes, n_blocks = meta.get("count"), meta.get("data_bytes"), meta.get("blocks")
    if meta.get("version") != FORMAT_VERSION or meta.get("fingerprint") != fingerprint or n != len(items):
        return None
    index_bytes = 8 * n + 8 * (n + 1) + 4 * n_blocks
    if size != HEADER + data_bytes + index_bytes + TRAILER:
        return None
    trailer = bytes(raw[size - TRAILER :])
    at, stored = np.frombuffer(trailer[8:24], np.int64)
    (index_crc, _) = np.frombuffer(trailer[24:], np.uint32)
    index = bytes(raw[HEADER + data_bytes : HEADER + data_bytes + index_bytes])
    if (
        trailer[:8] != DONE
        or at != HEADER + data_bytes
        or stored != data_bytes
        or zlib.crc32(header + index) != index_crc
    ):
        return None
    shapes = np.frombuffer(index[: 8 * n], np.int32).reshape(n, 2)
    offsets = np.frombuffer(index[8 * n : 8 * n + 8 * (n + 1)], np.int64)
    crcs = np.frombuffer(index[8 * n + 8 * (n + 1) :], np.uint32)
    pixels = raw[HEADER : HEADER + data_bytes]
    blocks = range(n_blocks) if sample is None else _sampled_blocks(n_blocks, sample)
    for b in blocks:
        if zlib.crc32(pixels[b * BLOCK : (b + 1) * BLOCK].data) != crcs[b]:
            return None
    return _Opened(pixels=pixels, shapes=shapes, offsets=offsets, row={rel: i for i, rel in enumerate(items)})


def _sampled_blocks(n_blocks: int, sample: int) -> list[int]:
    if n_blocks == 0:
        return []
    rng = np.random.default_rng()  # fresh entropy: the trials of a node together check many blocks
    picked = rng.choice(n_blocks, size=min(sample, n_blocks), replace=False)
    return sorted({0, n_blocks - 1, *map(int, picked)})

"""Small archives in each dataset's published form (the trees of :mod:`harness.fake_data`, packed as published),
for testing ``python -m study.data fetch`` against :class:`harness.http_server.FileServer`.

What each published archive holds (and so what these hold): ``CUB_200_2011.tgz`` → ``CUB_200_2011/`` plus a
top-level ``attributes.txt``; ``Stanford_Online_Products.zip`` → ``Stanford_Online_Products/``; the Cars mirror zip →
``names.csv, anno_*.csv, car_data/car_data/``; ``102flowers.tgz`` → ``jpg/`` (labels in a separate
``imagelabels.mat``); ``cifar-10-python.tar.gz`` → ``cifar-10-batches-py/``.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

from harness import fake_data
from trainables.datasets import entry, folder_of

__all__ = ["build", "pack_tar", "pack_zip"]


def _archive(dataset: str) -> str:
    """The file name ``dataset``'s (first) published source is saved under."""
    return entry(dataset).sources[0].filename


def pack_tar(base: Path, names: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            tar.add(base / name, arcname=name)
    return buf.getvalue()


def pack_zip(base: Path, names: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in names:
            top = base / name
            for path in sorted([top, *top.rglob("*")] if top.is_dir() else [top]):
                archive.write(path, path.relative_to(base).as_posix())
    return buf.getvalue()


def build(dataset: str, work: Path) -> tuple[dict[str, bytes], int]:
    """``({published file name: bytes}, number of images)`` for ``dataset``; trees are written under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    if dataset == "cub200":
        _, expected = fake_data.write_cub(work)
        (work / "attributes.txt").write_text("1 has_bill_shape::curved\n")
        return {_archive("cub200"): pack_tar(work, [folder_of("cub200"), "attributes.txt"])}, len(expected)
    if dataset == "sop":
        _, expected = fake_data.write_sop(work)
        return {_archive("sop"): pack_zip(work, [folder_of("sop")])}, len(expected)
    if dataset == "cars196":
        _, expected = fake_data.write_cars_mirror(work)
        names = ["names.csv", "anno_train.csv", "anno_test.csv", "car_data"]
        return {_archive("cars196"): pack_zip(work, names)}, len(expected)
    if dataset == "flowers102":
        root, expected = fake_data.write_flowers(work)
        archive, labels = (s.filename for s in entry("flowers102").sources)
        files = {archive: pack_tar(root, ["jpg"]), labels: (root / labels).read_bytes()}
        return files, len(expected)
    if dataset == "cifar10":
        _, written = fake_data.write_cifar10(work)
        return {_archive("cifar10"): pack_tar(work, [folder_of("cifar10")])}, len(written["train_y"]) + len(
            written["test_y"]
        )
    raise ValueError(f"no fake archive for {dataset!r}")

"""``python -m study.data export-csv DATASET --root DIR``: a built-in on-disk dataset as open-metric-learning's CSV
(``trainables/data/csv_oml.py``), read through the dataset's own loader so the CSV holds exactly its split.

Training rows are ``split: train``; test rows are ``split: validation`` and both query and gallery (each query
searched among the others), except In-Shop's, whose query and gallery rows keep their roles. Paths are relative to
``DIR``, so ``dataset: {name: csv, root: DIR, annotations: <the file>}`` reads the same images.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from study.data._download import FetchError, os_error
from trainables.schema.errors import DataError
from trainables.schema.spec import DatasetSpec

__all__ = ["export_csv"]

_NOT_FILES = {"cifar10": "CIFAR-10 keeps its images inside pickles; there are no image files to list"}


def _found_root(name: str, root: Path, first_item: str) -> Path:
    """The directory the loader's items are relative to: ``root`` or one of the layout's standard subfolders."""
    from trainables.data import loader_module

    layout = loader_module(name).LAYOUT
    for candidate in (root, *(root / s for s in layout.subdirs)):
        if (candidate / first_item).exists():
            return candidate
    raise FetchError(f"cannot find {first_item} below {root}")


def export_csv(name: str, root: Path, out: Path | None = None) -> tuple[Path, int]:
    """Write ``name``'s CSV (default ``root/<name>_oml.csv``); ``(path, rows)``. Written to a temporary name first,
    then renamed, so a failure leaves no half file."""
    from trainables.data import ON_DISK_DATASETS, load_dataset

    if name not in ON_DISK_DATASETS or name == "csv":
        raise FetchError(f"{name!r} is not a built-in on-disk dataset")
    if name in _NOT_FILES:
        raise FetchError(_NOT_FILES[name])
    root = root.expanduser().absolute()
    try:
        data = load_dataset(DatasetSpec(name=name, root=str(root)), seed=0)
    except DataError as e:
        raise FetchError(str(e)) from None
    base = _found_root(name, root, str(data.train.items[0]))
    prefix = os.path.relpath(base, root)

    def rel(item: object) -> str:
        return str(item) if prefix == "." else f"{prefix}/{item}"

    rows = [(int(y), rel(p), "train", "", "") for p, y in zip(data.train.items, data.train.labels)]
    both = data.gallery is None
    rows += [(int(y), rel(p), "validation", "True", str(both)) for p, y in zip(data.test.items, data.test.labels)]
    if data.gallery is not None:
        rows += [
            (int(y), rel(p), "validation", "False", "True") for p, y in zip(data.gallery.items, data.gallery.labels)
        ]
    out = out or root / f"{name}_oml.csv"
    tmp = out.with_name(out.name + ".tmp")
    try:
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["label", "path", "split", "is_query", "is_gallery"])
            writer.writerows(rows)
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise os_error(e, out) from None
    return out, len(rows)

"""``dataset.name: csv``: open-metric-learning's one-CSV dataset format (``dataset.annotations``, a file relative
to ``dataset.root``), so a user brings any dataset (or In-Shop's query/gallery split) without writing a loader.

Columns (OML, https://open-metric-learning.readthedocs.io, "Dataset format"): ``label`` (int), ``path`` (image
path relative to ``dataset.root``), ``split`` (``train`` | ``validation``), ``is_query``, ``is_gallery`` (booleans,
read on validation rows), optional ``category`` and optional boxes ``x_1, y_1, x_2, y_2``. ``split: validation``
rows are the test classes. When every validation row is both query and gallery, each query is searched among
the other validation images (the CUB/CARS/SOP protocol); otherwise queries are searched in the gallery rows (the
In-Shop protocol), which must then be disjoint. A row's box crops its image before the transforms. With a ``category``
column, the test queries carry their categories and the final epoch reports Recall@1 and MAP@R per category
(:mod:`trainables.metrics.categories`; an empty cell is the category ``none``). Every problem is one line naming
the row.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, image_splits

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "REQUIRED_COLUMNS", "BOX_COLUMNS", "load"]

LAYOUT = Layout(
    dataset="csv",
    expected="<root>/<dataset.annotations> with columns label, path, split (train|validation), is_query, is_gallery "
    "[, category, x_1, y_1, x_2, y_2] and images at <root>/<path>",
    url="open-metric-learning's CSV format",
    markers=(),
    fetchable=False,
)
REQUIRED_COLUMNS = ("label", "path", "split", "is_query", "is_gallery")
BOX_COLUMNS = ("x_1", "y_1", "x_2", "y_2")
_TRUE, _FALSE = {"true", "1", "1.0", "yes"}, {"false", "0", "0.0", "no"}


def _bool(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def _rows(path: Path) -> list[tuple[int, dict[str, str | None]]]:
    """``(line number, row)`` of the file, header checked."""
    if not path.is_file():
        raise LAYOUT.error("no such annotations file", path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise LAYOUT.error(f"the header lacks column(s) {', '.join(missing)}", path)
        boxes = [c for c in BOX_COLUMNS if c in columns]
        if boxes and len(boxes) != len(BOX_COLUMNS):
            raise LAYOUT.error(
                f"boxes need all of {', '.join(BOX_COLUMNS)}, but the header has {', '.join(boxes)}", path
            )
        rows: list[tuple[int, dict[str, str | None]]] = [(reader.line_num, dict(row)) for row in reader]
    if not rows:
        raise LAYOUT.error("no rows", path)
    return rows


_Box = tuple[float, float, float, float]


def _check_row(path: Path, lineno: int, row: dict[str, str | None]) -> tuple[int, str, str, bool, bool, _Box | None]:
    def bad(problem: str) -> Exception:
        return LAYOUT.error(f"row at line {lineno}: {problem}", path)

    extra = row.pop(None, None)  # type: ignore[call-overload]  # DictReader's restkey for surplus fields
    if extra is not None or any(v is None for v in row.values()):
        n = sum(v is not None for v in row.values()) + len(extra or [])
        raise bad(f"{n} fields, the header has {len(row)}")
    fields = {k: (v or "").strip() for k, v in row.items() if k is not None}
    try:
        label = int(fields["label"])
    except ValueError:
        raise bad(f"label {fields['label']!r} is not an integer") from None
    if not fields["path"]:
        raise bad("empty path")
    split = fields["split"]
    if split not in ("train", "validation"):
        raise bad(f"split {split!r} is not train or validation")
    flags = {}
    for name in ("is_query", "is_gallery"):
        value = _bool(fields[name]) if fields[name] else (False if split == "train" else None)
        if value is None:
            raise bad(f"{name} {fields[name]!r} is not a boolean (True/False/1/0)")
        flags[name] = value
    if split == "validation" and not (flags["is_query"] or flags["is_gallery"]):
        raise bad("a validation row must be a query, a gallery image or both")
    box = None
    if "x_1" in fields and any(fields[c] for c in BOX_COLUMNS):
        try:
            x1, y1, x2, y2 = (float(fields[c]) for c in BOX_COLUMNS)
        except ValueError:
            raise bad("box x_1, y_1, x_2, y_2 must be numbers") from None
        if not (0 <= x1 < x2 and 0 <= y1 < y2):
            raise bad(f"box must have 0 <= x_1 < x_2 and 0 <= y_1 < y_2, but got {x1=}, {y1=}, {x2=}, {y2=}")
        box = (x1, y1, x2, y2)
    return label, fields["path"], split, flags["is_query"], flags["is_gallery"], box


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.user_root(spec)
    if spec.annotations is None:
        raise LAYOUT.error("dataset.annotations is not set", root)
    path = root / spec.annotations
    rows = _rows(path)
    categories = (
        np.array([(row.get("category") or "").strip() for _, row in rows]) if "category" in rows[0][1] else None
    )
    parsed = [_check_row(path, lineno, row) for lineno, row in rows]
    items = [p for _, p, _, _, _, _ in parsed]
    labels = np.array([label for label, _, _, _, _, _ in parsed], dtype=np.int64)
    train = np.array([s == "train" for _, _, s, _, _, _ in parsed])
    query = np.array([q for _, _, _, q, _, _ in parsed]) & ~train
    gallery = np.array([g for _, _, _, _, g, _ in parsed]) & ~train
    boxes: dict[str, _Box] = {}
    for (lineno, _), (_, item, _, _, _, box) in zip(rows, parsed):
        if box is not None and boxes.setdefault(item, box) != box:
            raise LAYOUT.error(f"row at line {lineno}: {item} appears again with another box", path)
    if (query == gallery).all():  # every validation row is both: leave-one-out among them
        splits = image_splits(spec, LAYOUT, root, items, labels, train, test_mask=~train, boxes=boxes)
        return _with_categories(splits, categories, ~train)
    both = np.flatnonzero(query & gallery)
    if both.size:
        lineno = rows[both[0]][0]
        raise LAYOUT.error(
            f"row at line {lineno} is both query and gallery while other validation rows are not; "
            "use one or the other per row, or both on every validation row",
            path,
        )
    splits = image_splits(spec, LAYOUT, root, items, labels, train, test_mask=query, gallery_mask=gallery, boxes=boxes)
    return _with_categories(splits, categories, query)


def _with_categories(splits: DatasetSplits, categories: np.ndarray | None, test_mask: np.ndarray) -> DatasetSplits:
    """The test queries' categories (the split holds the masked rows in file order), when the CSV names any."""
    if categories is None or not any(categories[test_mask]):
        return splits
    test = dataclasses.replace(splits.test, categories=np.array([c or "none" for c in categories[test_mask]]))
    return dataclasses.replace(splits, test=test)

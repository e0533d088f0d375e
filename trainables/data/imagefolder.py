"""Any ``root/<class>/<image>`` tree (the user's own data), split by class.

By default the first half of the sorted class names train and the rest test (an odd count gives train the
extra class). ``dataset.split_file`` names the split explicitly: one ``<class> train|test`` line per class
(blank lines and ``#`` comments ignored); classes it does not list are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "IMAGE_EXTENSIONS", "load"]

LAYOUT = Layout(
    dataset="imagefolder",
    expected="<root>/<class>/<image>.{jpg,jpeg,png,bmp,ppm,pgm,tif,tiff,webp} (optional split file: '<class> train|test' lines)",
    url="your own data (any class-per-folder tree)",
    markers=(),
    fetchable=False,
)

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"})


def _read_split_file(path: Path, classes: list[str]) -> dict[str, bool]:
    """``{class: is_train}`` from a split file; every listed class must exist."""
    if not path.is_file():
        raise LAYOUT.error("dataset.split_file does not exist", path)
    known = set(classes)
    out: dict[str, bool] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, role = (line.rsplit(None, 1) + [""])[:2]
        if role not in ("train", "test"):
            raise LAYOUT.error(f"line {lineno} must be '<class> train|test', got {line!r}", path)
        if name not in known:
            raise LAYOUT.error(f"line {lineno} names class {name!r}, which has no folder with images", path)
        out[name] = role == "train"
    if not any(out.values()) or all(out.values()):
        raise LAYOUT.error("the split file must list at least one train and one test class", path)
    return out


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.user_root(spec)
    items: list[str] = []
    labels: list[int] = []
    classes: list[str] = []
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(
            str(f.relative_to(root))
            for f in class_dir.rglob("*")
            if f.suffix.lower() in IMAGE_EXTENSIONS and f.is_file()
        )
        if not files:
            continue
        items += files
        labels += [len(classes)] * len(files)
        classes.append(class_dir.name)
    y = np.array(labels, dtype=np.int64)
    if spec.split_file is None:
        train_mask = first_half_classes(LAYOUT, y, root)
        return image_splits(spec, LAYOUT, root, items, y, train_mask)
    roles = _read_split_file(Path(spec.split_file).expanduser(), classes)
    train_ids = [i for i, c in enumerate(classes) if roles.get(c) is True]
    test_ids = [i for i, c in enumerate(classes) if roles.get(c) is False]
    return image_splits(spec, LAYOUT, root, items, y, np.isin(y, train_ids), test_mask=np.isin(y, test_ids))

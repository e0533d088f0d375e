"""Stanford Cars / CARS196 (Krause et al. 2013); classes 1-98 train, 99-196 test (SPEC "Data").

Two layouts are read: the original ``car_ims.tgz`` + ``cars_annos.mat`` and, since the official site is gone, the
maintained class-per-folder mirror that pytorch-metric-learning downloads (``names.csv``, ``anno_train.csv``,
``anno_test.csv`` with rows ``<image>,x1,y1,x2,y2,<class>``, images in
``car_data/car_data/{train,test}/<class name with '/' as '-'>/<image>``). The annotation's own train/test split
(the classification split) is not used in either: metric learning splits by class.
"""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits, parse_int, read_mat
from trainables.datasets import folder_of
from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from pathlib import Path

    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "MIRROR_LAYOUT", "load"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("cars196")
LAYOUT = Layout(
    dataset="cars196",
    expected="<root>/{car_ims/<image>.jpg, cars_annos.mat with annotations.relative_im_path and annotations.class} "
    "or the class-folder mirror <root>/{names.csv, anno_train.csv, anno_test.csv, car_data/car_data/}",
    url="https://ai.stanford.edu/~jkrause/cars/car_dataset.html",
    markers=("car_ims", "cars_annos.mat"),
    subdirs=(_FOLDER, "CARS196", "stanford_cars"),
)
MIRROR_LAYOUT = Layout(
    dataset="cars196",
    expected="<root>/{names.csv, anno_train.csv, anno_test.csv, car_data/car_data/{train,test}/<class>/<image>.jpg}",
    url="https://www.kaggle.com/datasets/jutrera/stanford-car-dataset-by-classes-folder",
    markers=("names.csv", "anno_train.csv", "anno_test.csv", "car_data"),
    subdirs=LAYOUT.subdirs,
)


def _load_mat(root: Path) -> tuple[list[str], np.ndarray]:
    mat_path = root / "cars_annos.mat"
    annotations = read_mat(LAYOUT, mat_path, "annotations")
    try:
        items = [str(p) for p in annotations["relative_im_path"]]
        labels = np.asarray(annotations["class"], dtype=np.int64)
    except (ValueError, TypeError) as e:  # not a struct array with these fields
        raise LAYOUT.error(f"annotations lack relative_im_path / class ({e})", mat_path) from None
    return items, labels


def _load_mirror(root: Path) -> tuple[list[str], np.ndarray]:
    names = [line.strip() for line in (root / "names.csv").read_text().splitlines() if line.strip()]
    items: list[str] = []
    labels: list[int] = []
    for split in ("train", "test"):
        path = root / f"anno_{split}.csv"
        with path.open(newline="") as f:
            for lineno, row in enumerate(csv.reader(f), start=1):
                if not row:
                    continue
                if len(row) != 6:
                    raise MIRROR_LAYOUT.error(f"line {lineno} has {len(row)} fields instead of 6", path)
                label = parse_int(MIRROR_LAYOUT, path, row[5])
                if not 1 <= label <= len(names):
                    raise MIRROR_LAYOUT.error(
                        f"line {lineno}: class {label} is not in names.csv (1-{len(names)})", path
                    )
                items.append(f"car_data/car_data/{split}/{names[label - 1].replace('/', '-')}/{row[0]}")
                labels.append(label)
    return items, np.array(labels, dtype=np.int64)


def load(spec: DatasetSpec) -> DatasetSplits:
    try:
        root = LAYOUT.find_root(spec)
        items, labels = _load_mat(root)
    except DataError as official:
        try:
            root = MIRROR_LAYOUT.find_root(spec)
        except DataError:
            raise official from None
        items, labels = _load_mirror(root)
        return image_splits(spec, MIRROR_LAYOUT, root, items, labels, first_half_classes(MIRROR_LAYOUT, labels, root))
    return image_splits(spec, LAYOUT, root, items, labels, first_half_classes(LAYOUT, labels, root))

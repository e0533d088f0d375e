"""CUB-200-2011 (Wah et al. 2011) in its official layout; classes 1-100 train, 101-200 test (SPEC "Data").

``train_test_split.txt`` is the classification split and is not used: metric learning splits by class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits, parse_int, read_rows
from trainables.datasets import folder_of

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "load"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("cub200")
LAYOUT = Layout(
    dataset="cub200",
    expected=f"{_FOLDER}/{{images/<class>/<image>.jpg, images.txt, image_class_labels.txt, classes.txt}}",
    url="https://www.vision.caltech.edu/datasets/cub_200_2011/",
    markers=("images", "images.txt", "image_class_labels.txt", "classes.txt"),
    subdirs=(_FOLDER,),
)


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.find_root(spec)
    images_txt, labels_txt = root / "images.txt", root / "image_class_labels.txt"
    paths = {parse_int(LAYOUT, images_txt, i): p for i, p in read_rows(LAYOUT, images_txt, 2)}
    class_of = {
        parse_int(LAYOUT, labels_txt, i): parse_int(LAYOUT, labels_txt, c) for i, c in read_rows(LAYOUT, labels_txt, 2)
    }
    if paths.keys() != class_of.keys():
        raise LAYOUT.error("images.txt and image_class_labels.txt list different image ids", root)
    ids = sorted(paths)
    items = [f"images/{paths[i]}" for i in ids]
    labels = np.array([class_of[i] for i in ids], dtype=np.int64)
    return image_splits(spec, LAYOUT, root, items, labels, first_half_classes(LAYOUT, labels, root))

"""Oxford 102 Flowers (Nilsback & Zisserman 2008): ``jpg/image_%05d.jpg`` with labels in ``imagelabels.mat``;
classes 1-51 train, 52-102 test (SPEC "Data"). ``setid.mat`` (the classification split) is not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits, read_mat
from trainables.datasets import folder_of

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "load"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("flowers102")
LAYOUT = Layout(
    dataset="flowers102",
    expected="<root>/{jpg/image_00001.jpg ..., imagelabels.mat with labels[i-1] the class of image i}",
    url="https://www.robots.ox.ac.uk/~vgg/data/flowers/102/",
    markers=("jpg", "imagelabels.mat"),
    subdirs=(_FOLDER, "102flowers", "flowers-102"),
)


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.find_root(spec)
    labels = read_mat(LAYOUT, root / "imagelabels.mat", "labels").astype(np.int64)
    items = [f"jpg/image_{i:05d}.jpg" for i in range(1, labels.size + 1)]
    return image_splits(spec, LAYOUT, root, items, labels, first_half_classes(LAYOUT, labels, root))

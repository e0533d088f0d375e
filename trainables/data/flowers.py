"""Oxford 102 Flowers (Nilsback & Zisserman 2008): ``jpg/image_%05d.jpg`` with labels in ``imagelabels.mat``;
classes 1-51 train, 52-102 test (SPEC "Data"). ``setid.mat`` (the classification split) is not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits

if TYPE_CHECKING:
    from study.spec import DatasetSpec
    from trainables.data._splits import DatasetSplits

__all__ = ["LAYOUT", "load"]

LAYOUT = Layout(
    dataset="flowers102",
    expected="<root>/{jpg/image_00001.jpg ..., imagelabels.mat with labels[i-1] the class of image i}",
    url="https://www.robots.ox.ac.uk/~vgg/data/flowers/102/",
    markers=("jpg", "imagelabels.mat"),
    subdirs=("flowers102", "102flowers", "flowers-102"),
)


def load(spec: DatasetSpec) -> DatasetSplits:
    from scipy.io import loadmat

    root = LAYOUT.find_root(spec)
    mat_path = root / "imagelabels.mat"
    try:
        labels = np.asarray(loadmat(mat_path)["labels"], dtype=np.int64).ravel()
    except (KeyError, ValueError, TypeError, OSError) as e:
        raise LAYOUT.error(f"cannot read labels ({type(e).__name__}: {e}) from", mat_path) from None
    items = [f"jpg/image_{i:05d}.jpg" for i in range(1, labels.size + 1)]
    return image_splits(spec, LAYOUT, root, items, labels, first_half_classes(LAYOUT, labels, root))

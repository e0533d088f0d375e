"""Stanford Cars / CARS196 (Krause et al. 2013) in the layout of ``car_ims.tgz`` + ``cars_annos.mat``;
classes 1-98 train, 99-196 test (SPEC "Data"). The annotation's own ``test`` flag (the classification split)
is not used: metric learning splits by class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, first_half_classes, image_splits, read_mat

if TYPE_CHECKING:
    from schema.spec import DatasetSpec
    from trainables.data._splits import DatasetSplits

__all__ = ["LAYOUT", "load"]

LAYOUT = Layout(
    dataset="cars196",
    expected="<root>/{car_ims/<image>.jpg, cars_annos.mat with annotations.relative_im_path and annotations.class}",
    url="https://ai.stanford.edu/~jkrause/cars/car_dataset.html",
    markers=("car_ims", "cars_annos.mat"),
    subdirs=("cars196", "CARS196", "stanford_cars"),
)


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.find_root(spec)
    mat_path = root / "cars_annos.mat"
    annotations = read_mat(LAYOUT, mat_path, "annotations")
    try:
        items = [str(p) for p in annotations["relative_im_path"]]
        labels = np.asarray(annotations["class"], dtype=np.int64)
    except (ValueError, TypeError) as e:  # not a struct array with these fields
        raise LAYOUT.error(f"annotations lack relative_im_path / class ({e})", mat_path) from None
    return image_splits(spec, LAYOUT, root, items, labels, first_half_classes(LAYOUT, labels, root))

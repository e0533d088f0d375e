"""Stanford Online Products (Oh Song et al. 2016, https://arxiv.org/abs/1511.06452) with its official split:
``Ebay_train.txt`` (classes 1-11318) and ``Ebay_test.txt`` (11319-22634); most classes have 2-12 images.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, image_splits, parse_int, read_rows
from trainables.datasets import folder_of

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "load"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("sop")
LAYOUT = Layout(
    dataset="sop",
    expected=f"{_FOLDER}/{{Ebay_train.txt, Ebay_test.txt, <category>_final/<image>.JPG}} "
    "(rows: image_id class_id super_class_id path, one header line)",
    url="https://cvgl.stanford.edu/projects/lifted_struct/",
    markers=("Ebay_train.txt", "Ebay_test.txt"),
    subdirs=(_FOLDER,),
)


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.find_root(spec)
    items: list[str] = []
    labels: list[int] = []
    is_train: list[bool] = []
    for name in ("Ebay_train.txt", "Ebay_test.txt"):
        path = root / name
        for _, class_id, _, image in read_rows(LAYOUT, path, 4, skip=1):
            items.append(image)
            labels.append(parse_int(LAYOUT, path, class_id))
            is_train.append(name == "Ebay_train.txt")
    return image_splits(spec, LAYOUT, root, items, np.array(labels, dtype=np.int64), np.array(is_train))

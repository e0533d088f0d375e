"""DeepFashion In-Shop Clothes Retrieval (Liu et al. 2016) with its official partition: 3997 training items;
evaluation retrieves the 14218 query images against the 12612 gallery images (of the other 3985 items).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainables.data._files import Layout, image_splits, read_rows
from trainables.datasets import folder_of

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "load"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("inshop")
LAYOUT = Layout(
    dataset="inshop",
    expected=f"{_FOLDER}/{{img/<...>.jpg, Eval/list_eval_partition.txt}} "
    "(rows: image_name item_id train|query|gallery after a count line and a header line)",
    url="https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html",
    markers=("img",),
    subdirs=(_FOLDER, "InShop", "inshop"),
)

_STATUSES = ("train", "query", "gallery")


def load(spec: DatasetSpec) -> DatasetSplits:
    root = LAYOUT.find_root(spec)
    path = root / "Eval" / "list_eval_partition.txt"
    if not path.exists() and (root / "list_eval_partition.txt").exists():
        path = root / "list_eval_partition.txt"
    rows = read_rows(LAYOUT, path, 3, skip=2)
    bad = next((s for _, _, s in rows if s not in _STATUSES), None)
    if bad is not None:
        raise LAYOUT.error(f"evaluation status {bad!r} is not one of {', '.join(_STATUSES)}", path)
    try:
        labels = np.array([int(item.removeprefix("id_")) for _, item, _ in rows], dtype=np.int64)
    except ValueError:
        raise LAYOUT.error("item ids must look like id_00000001", path) from None
    items = [image for image, _, _ in rows]
    status = np.array([s for _, _, s in rows])
    return image_splits(
        spec,
        LAYOUT,
        root,
        items,
        labels,
        status == "train",
        test_mask=status == "query",
        gallery_mask=status == "gallery",
    )

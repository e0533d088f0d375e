"""CIFAR-10 (Krizhevsky 2009) from the python pickle batches, for the contrastive studies.

Unlike the retrieval benchmarks, CIFAR-10 keeps its official split (50k train / 10k test images of the same
10 classes): the contrastive protocol (SimCLR, debiased contrastive loss, https://arxiv.org/abs/2007.00224
Sec. 5) trains on the training images and evaluates on the test images; Recall@k on the test set is then
the kNN-retrieval accuracy. Images stay 32×32 (resize = crop = 32) unless the spec sets other sizes.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.data._files import Layout
from trainables.data._splits import DatasetSplits, LabeledSplit
from trainables.datasets import folder_of

if TYPE_CHECKING:
    from pathlib import Path

    from PIL import Image

    from trainables.schema.spec import DatasetSpec

__all__ = ["LAYOUT", "NUM_TRAIN_CLASSES", "load", "check"]

#: Its folder under ``dataset.root`` (the catalogue row: :mod:`trainables.datasets`).
_FOLDER = folder_of("cifar10")
LAYOUT = Layout(
    dataset="cifar10",
    expected=f"{_FOLDER}/{{data_batch_1 ... data_batch_5, test_batch}} (python pickles with data, labels)",
    url="https://www.cs.toronto.edu/~kriz/cifar.html",
    markers=(*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
    subdirs=(_FOLDER,),
)
#: Every official training batch holds all 10 classes (read by the driver's class-count check).
NUM_TRAIN_CLASSES = 10
_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with path.open("rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError) as e:
        raise LAYOUT.error(f"cannot read batch ({type(e).__name__}: {e})", path) from None
    if len(images) != len(labels):
        raise LAYOUT.error(f"{len(images)} images but {len(labels)} labels", path)
    return images, labels


def array_to_pil(x: torch.Tensor) -> Image.Image:
    """One stored ``(32, 32, 3)`` uint8 image as a PIL image (picklable loader for DataLoader workers)."""
    from PIL import Image

    return Image.fromarray(x.numpy())


def _split(paths: list[Path]) -> LabeledSplit:
    images, labels = zip(*(_read_batch(p) for p in paths))
    y = np.concatenate(labels)
    return LabeledSplit(
        items=torch.from_numpy(np.concatenate(images)), labels=y, true_labels=y.copy(), load_item=array_to_pil
    )


def check(spec: DatasetSpec) -> None:
    """Driver-side check: the batch files exist (the 180 MB of pixels are read only by the trials)."""
    LAYOUT.find_root(spec)


def load(spec: DatasetSpec) -> DatasetSplits:
    from trainables.data.transforms import eval_transform, image_sizes, train_transform, view_transform

    root = LAYOUT.find_root(spec)
    resize, crop = image_sizes(spec, default=(32, 32))
    return DatasetSplits(
        name=spec.name,
        train=_split([root / b for b in _TRAIN_BATCHES]),
        test=_split([root / "test_batch"]),
        input_shape=(3, crop, crop),
        train_transform=train_transform(resize, crop),
        eval_transform=eval_transform(resize, crop),
        view_transform=view_transform(crop),
    )

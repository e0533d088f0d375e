"""The embedded default: scikit-learn's bundled 8×8 digits, classes 0-4 train, 5-9 test (no download)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.data._splits import AffineView, DatasetSplits, in_memory_split

if TYPE_CHECKING:
    from trainables.schema.spec import DatasetSpec

__all__ = ["load_digits_splits"]

TRAIN_CLASSES = frozenset(range(5))


def load_digits_splits(spec: DatasetSpec) -> DatasetSplits:
    from sklearn.datasets import load_digits

    del spec  # no root: the data ships with scikit-learn
    digits = load_digits()
    images = torch.as_tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
    labels = digits.target.astype(np.int64)
    is_train = np.isin(labels, sorted(TRAIN_CLASSES))

    return DatasetSplits(
        name="digits",
        train=in_memory_split(images, labels, is_train),
        test=in_memory_split(images, labels, ~is_train),
        input_shape=(1, 8, 8),
        view_transform=view_transform(),
    )


def view_transform() -> AffineView:
    """One random view of an 8×8 digit for the two-view families: a small rotation, shift and scale (no flip:
    it would turn some digits into others). Single-view families train on the digits as they are."""
    return AffineView(degrees=15, translate=(0.125, 0.125), scale=(0.85, 1.15))

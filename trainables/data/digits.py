"""The embedded default: scikit-learn's bundled 8×8 digits, classes 0-4 train, 5-9 test (no download)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.data._splits import DatasetSplits, LabeledSplit

if TYPE_CHECKING:
    from study.spec import DatasetSpec

__all__ = ["load_digits_splits"]

TRAIN_CLASSES = frozenset(range(5))


def load_digits_splits(spec: DatasetSpec) -> DatasetSplits:
    from sklearn.datasets import load_digits

    del spec  # no root: the data ships with scikit-learn
    digits = load_digits()
    images = torch.as_tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
    labels = digits.target.astype(np.int64)
    is_train = np.isin(labels, sorted(TRAIN_CLASSES))

    def split(mask: np.ndarray) -> LabeledSplit:
        idx = torch.as_tensor(np.flatnonzero(mask))
        return LabeledSplit(items=images[idx], labels=labels[mask], true_labels=labels[mask].copy())

    return DatasetSplits(name="digits", train=split(is_train), test=split(~is_train), input_shape=(1, 8, 8))

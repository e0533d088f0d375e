"""Datasets: name → loader, all returning :class:`DatasetSplits` with a class-disjoint train/test split."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainables.data._splits import DatasetSplits, LabeledSplit

if TYPE_CHECKING:
    from study.spec import DatasetSpec

__all__ = ["DATASET_NAMES", "DatasetSplits", "LabeledSplit", "load_dataset"]

# name → (module, loader function); imported lazily so a spec check loads nothing heavy.
_LOADERS: dict[str, tuple[str, str]] = {
    "digits": ("trainables.data.digits", "load_digits_splits"),
}

DATASET_NAMES: tuple[str, ...] = tuple(_LOADERS)


def load_dataset(spec: DatasetSpec, seed: int) -> DatasetSplits:
    """Load ``spec.name``, then apply the spec's label noise and subset to the training split only."""
    from trainables.data.noise import apply_label_noise

    module_name, fn_name = _LOADERS[spec.name]
    splits: DatasetSplits = getattr(importlib.import_module(module_name), fn_name)(spec)
    train = apply_label_noise(splits.train, spec.noise)
    if spec.subset == "clean_only":
        train = train.subset(~train.noisy_mask)
    del seed  # the noise has its own seed (spec.noise.seed) so every trial of a study sees the same labels
    return splits.with_train(train)

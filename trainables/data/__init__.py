"""Datasets: name → loader, all returning :class:`DatasetSplits` with a class-disjoint train/test split.

Each on-disk loader is one module reading its official layout (``cub``, ``cars``, ``sop``, ``inshop``,
``flowers``, ``cifar10``, ``imagefolder``, and ``csv``: open-metric-learning's CSV format) and exposing
``load(spec)``; the embedded ``digits``, the
generated ``glyphs`` and the thesis' paired 2-D ``flows2d`` need no root.
:func:`check_dataset` runs on the driver before Ray starts, so a missing root is one line and exit 2.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainables.data._splits import DatasetSplits, LabeledSplit
from trainables.datasets import DATASET_NAMES, EMBEDDED_DATASETS, ON_DISK_DATASETS, SAME_CLASS_TEST_DATASETS, entry

if TYPE_CHECKING:
    from types import ModuleType

    from trainables.schema.spec import DatasetSpec

__all__ = [
    "DATASET_NAMES",
    "EMBEDDED_DATASETS",
    "ON_DISK_DATASETS",
    "SAME_CLASS_TEST_DATASETS",
    "DatasetSplits",
    "LabeledSplit",
    "check_dataset",
    "load_dataset",
    "loader_module",
    "train_class_count",
]


def loader_module(name: str) -> ModuleType:
    """The loader module of dataset ``name`` (its catalogue row's ``loader``), imported now."""
    return importlib.import_module(entry(name).loader.split(":")[0])


def _load_splits(spec: DatasetSpec) -> DatasetSplits:
    module, function = entry(spec.name).loader.split(":")
    splits: DatasetSplits = getattr(importlib.import_module(module), function)(spec)
    return splits


def check_dataset(spec: DatasetSpec) -> None:
    """Driver-side check that ``spec.root`` holds the dataset in its layout; raises one-line ``DataError``.

    Reads the annotation files (not the pixels) through the loader itself, so the check and the trials
    agree; a module with a cheaper ``check(spec)`` (CIFAR-10's pickles hold the pixels) uses that instead.
    """
    if spec.name not in ON_DISK_DATASETS:
        return
    module = loader_module(spec.name)
    getattr(module, "check", getattr(module, entry(spec.name).loader.split(":")[1]))(spec)


def train_class_count(spec: DatasetSpec) -> int:
    """The number of (observed) training classes of ``spec``, for the driver's class-count checks.

    From the annotations, not the pixels: a module whose training classes are fixed says so in
    ``NUM_TRAIN_CLASSES`` (CIFAR-10, whose pickles hold the pixels); else the split is loaded as the trials load it
    (image datasets read their annotation files and load pixels lazily, per item; the embedded ones are small).
    """
    fixed = getattr(loader_module(spec.name), "NUM_TRAIN_CLASSES", None)
    if fixed is not None and spec.subset == "all" and spec.noise.kind != "file":  # a list is read and mapped
        return int(fixed)
    return load_dataset(spec, 0).train.num_classes


def load_dataset(spec: DatasetSpec, seed: int) -> DatasetSplits:
    """Load ``spec.name``, then apply the spec's label noise and subset to the training split only."""
    from trainables.data.noise import apply_label_noise

    splits = _load_splits(spec)
    train = apply_label_noise(splits.train, spec.noise, spec.name)
    if spec.subset == "clean_only":
        train = train.subset(~train.noisy_mask)
    del seed  # the noise has its own seed (spec.noise.seed) so every trial of a study sees the same labels
    return splits.with_train(train)

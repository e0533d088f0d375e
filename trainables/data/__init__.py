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
from trainables.names import DATASET_NAMES, EMBEDDED_DATASETS, ON_DISK_DATASETS, SAME_CLASS_TEST_DATASETS

if TYPE_CHECKING:
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
    "train_class_count",
]

# name → (module, loader function); imported lazily so a spec check loads nothing heavy.
_LOADERS: dict[str, tuple[str, str]] = {
    "digits": ("trainables.data.digits", "load_digits_splits"),
    "glyphs": ("trainables.data.glyphs", "load_glyphs_splits"),
    "flows2d": ("trainables.data.flows2d", "load_flows2d_splits"),
    "cub200": ("trainables.data.cub", "load"),
    "cars196": ("trainables.data.cars", "load"),
    "sop": ("trainables.data.sop", "load"),
    "inshop": ("trainables.data.inshop", "load"),
    "flowers102": ("trainables.data.flowers", "load"),
    "cifar10": ("trainables.data.cifar10", "load"),
    "imagefolder": ("trainables.data.imagefolder", "load"),
    "csv": ("trainables.data.csv_oml", "load"),
}


def check_dataset(spec: DatasetSpec) -> None:
    """Driver-side check that ``spec.root`` holds the dataset in its layout; raises one-line ``DataError``.

    Reads the annotation files (not the pixels) through the loader itself, so the check and the trials
    agree; a module with a cheaper ``check(spec)`` (CIFAR-10's pickles hold the pixels) uses that instead.
    """
    if spec.name not in ON_DISK_DATASETS:
        return
    module_name, fn_name = _LOADERS[spec.name]
    module = importlib.import_module(module_name)
    getattr(module, "check", getattr(module, fn_name))(spec)


def train_class_count(spec: DatasetSpec) -> int:
    """The number of (observed) training classes of ``spec``, for the driver's class-count checks.

    From the annotations, not the pixels: a module whose training classes are fixed says so in
    ``NUM_TRAIN_CLASSES`` (CIFAR-10, whose pickles hold the pixels); else the split is loaded as the trials load it
    (image datasets read their annotation files and load pixels lazily, per item; the embedded ones are small).
    """
    fixed = getattr(importlib.import_module(_LOADERS[spec.name][0]), "NUM_TRAIN_CLASSES", None)
    if fixed is not None and spec.subset == "all" and spec.noise.kind != "file":  # a list is read and mapped
        return int(fixed)
    return load_dataset(spec, 0).train.num_classes


def load_dataset(spec: DatasetSpec, seed: int) -> DatasetSplits:
    """Load ``spec.name``, then apply the spec's label noise and subset to the training split only."""
    from trainables.data.noise import apply_label_noise

    module_name, fn_name = _LOADERS[spec.name]
    splits: DatasetSplits = getattr(importlib.import_module(module_name), fn_name)(spec)
    train = apply_label_noise(splits.train, spec.noise, spec.name)
    if spec.subset == "clean_only":
        train = train.subset(~train.noisy_mask)
    del seed  # the noise has its own seed (spec.noise.seed) so every trial of a study sees the same labels
    return splits.with_train(train)

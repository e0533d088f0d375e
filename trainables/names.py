"""The names a spec may use for a dataset or a backbone, without importing torch.

A spec error (a typo, a bad ``--set``) must come back in a fraction of a second, so the driver checks names
against this module. The dataset names and flags are read off the catalogue (:mod:`trainables.datasets`, one row per
dataset); :mod:`trainables.models` (which imports torch) takes its name lists from here, and
``tests/study/test_fast_errors.py`` checks that its builder table matches.
"""

from __future__ import annotations

from trainables.datasets import DATASETS

__all__ = [
    "DATASET_NAMES",
    "EMBEDDED_DATASETS",
    "ON_DISK_DATASETS",
    "SAME_CLASS_TEST_DATASETS",
    "PAIRED_DATASETS",
    "BACKBONE_NAMES",
    "PRETRAINABLE",
]

DATASET_NAMES: tuple[str, ...] = tuple(d.name for d in DATASETS)
#: Datasets embedded in the code (no ``dataset.root``): scikit-learn's digits, the generated glyphs and the thesis'
#: 2-D flows pairs (``flows2d``: an optional ``dataset.root`` is where its trained flows are cached).
EMBEDDED_DATASETS: frozenset[str] = frozenset(d.name for d in DATASETS if d.embedded)
#: Datasets read from ``dataset.root`` (every one but the embedded ones).
ON_DISK_DATASETS: frozenset[str] = frozenset(DATASET_NAMES) - EMBEDDED_DATASETS
#: Datasets whose test split has the training classes (the contrastive protocol), so a linear probe fits.
SAME_CLASS_TEST_DATASETS: frozenset[str] = frozenset(d.name for d in DATASETS if d.same_class_test)
#: Datasets whose test split pairs two views of each sample (two modalities made from one latent): their trials also
#: report the paired metrics (:data:`trainables.metric_registry.EVALUATION_METRICS`, ``requires="paired_test"``).
PAIRED_DATASETS: frozenset[str] = frozenset(d.name for d in DATASETS if d.paired)

#: Backbones with ImageNet weights (``model.pretrained: true``): torchvision's.
PRETRAINABLE: tuple[str, ...] = ("resnet18", "resnet34", "resnet50", "googlenet")
BACKBONE_NAMES: tuple[str, ...] = ("small_cnn", "paired_mlp", *PRETRAINABLE)

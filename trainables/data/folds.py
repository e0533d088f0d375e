"""Validation carved from the training classes: class-disjoint folds (k-fold) or one held-out group.

The protocol of "A Metric Learning Reality Check" (Musgrave, Belongie, Lim, ECCV 2020, Sec. 4): hyperparameters
are chosen on classes that are neither trained on by the model being scored nor among the test classes. The
label noise is injected before the split, so folds are formed from the *observed* training labels (what a
practitioner has) and every fold carries the study's noise rate; ``labels: clean`` scores the same validation
samples with their true labels instead (the oracle arm).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from trainables.data._splits import DatasetSplits
    from trainables.schema.spec import ValidationSpec

__all__ = ["validation_groups", "check_batch_classes", "check_validation", "fold_splits"]


def validation_groups(classes: np.ndarray, spec: ValidationSpec) -> list[np.ndarray]:
    """The class groups to validate on: ``folds`` near-equal groups (k-fold) or one group (holdout).

    Classes are shuffled with ``spec.seed``, so every trial of a study (and its resume) sees the same groups.
    """
    classes = np.sort(np.unique(classes))
    order = np.random.default_rng(spec.seed).permutation(classes)
    if spec.kind == "kfold":
        return [np.sort(g) for g in np.array_split(order, spec.folds)]
    if spec.kind == "holdout":
        n_val = max(1, int(round(spec.fraction * classes.size)))
        return [np.sort(order[:n_val])]
    return []


def check_batch_classes(num_classes: int, classes_per_batch: int, dataset: str) -> None:
    """Raise a one-line ``DataError`` when a training split has fewer classes than P = ``classes_per_batch``.

    The one P rule, checked by every trial on the split it trains on and by the driver (``trainables.checks``)
    on the dataset's training classes before Ray starts. K needs no such rule: the balanced sampler draws a
    class smaller than K as evenly as it can (:mod:`trainables.data.sampler`).
    """
    if num_classes < classes_per_batch:
        raise DataError(
            f"train.classes_per_batch={classes_per_batch} exceeds the {num_classes} training classes of {dataset!r}"
        )


def check_validation(num_classes: int, spec: ValidationSpec, classes_per_batch: int, dataset: str) -> None:
    """Raise a one-line ``DataError`` when the training classes cannot form the requested validation groups.

    k-fold: every fold needs at least P = ``classes_per_batch`` classes (so the other folds train on P×K batches
    and the fold itself is a retrieval problem); holdout: the held-out group needs 2 classes and the rest P.
    """
    if spec.kind == "kfold":
        if spec.folds > num_classes:
            raise DataError(f"validation.folds={spec.folds} exceeds the {num_classes} training classes of {dataset!r}")
        smallest = num_classes // spec.folds
        if smallest < classes_per_batch:
            raise DataError(
                f"validation.folds={spec.folds}: the {num_classes} training classes of {dataset!r} give folds of "
                f"{smallest} classes, fewer than train.classes_per_batch={classes_per_batch}; use fewer folds, a "
                "smaller P, validation.kind: holdout, or none"
            )
    elif spec.kind == "holdout":
        n_val = max(1, int(round(spec.fraction * num_classes)))
        if n_val < 2 or num_classes - n_val < classes_per_batch:
            raise DataError(
                f"validation.fraction={spec.fraction} of the {num_classes} training classes of {dataset!r} holds "
                f"out {n_val} classes and trains on {num_classes - n_val}; the held-out group needs at least 2 and "
                f"the rest at least train.classes_per_batch={classes_per_batch}"
            )


def fold_splits(splits: DatasetSplits, val_classes: np.ndarray, labels: str) -> DatasetSplits:
    """``splits`` with its training split divided: train on the samples whose observed label is outside
    ``val_classes``, evaluate (as ``test``) on the others, scored with their observed or true labels.

    The test classes and the In-Shop gallery are dropped from the result, so nothing built from it can see them.
    """
    train = splits.train
    in_val = np.isin(train.labels, val_classes)
    val = train.subset(in_val)
    if labels == "clean":
        val = val.with_labels(val.true_labels)
    return dataclasses.replace(splits, train=train.subset(~in_val), test=val, gallery=None)

"""Driver-side checks of a study's inputs, run before anything is written or Ray starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainables.data import check_dataset, load_dataset
from trainables.data.folds import check_validation
from trainables.models import check_pretrained

if TYPE_CHECKING:
    from schema.spec import StudySpec

__all__ = ["check_inputs"]


def check_inputs(spec: StudySpec) -> None:
    """Raise a one-line ``DataError`` if the dataset root or the pretrained weights cannot be read here, or if
    the training classes cannot form the validation folds the spec asks for."""
    check_dataset(spec.dataset)
    check_pretrained(spec.model)
    if spec.validation.enabled:
        # Annotations (or the embedded arrays) only: image datasets load pixels lazily, per item.
        num_classes = load_dataset(spec.dataset, spec.seed).train.num_classes
        check_validation(num_classes, spec.validation, spec.train.classes_per_batch, spec.dataset.name)

"""Driver-side checks of a study's inputs, run before anything is written or Ray starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainables.data import check_dataset
from trainables.models import check_pretrained

if TYPE_CHECKING:
    from study.spec import StudySpec

__all__ = ["check_inputs"]


def check_inputs(spec: StudySpec) -> None:
    """Raise a one-line ``DataError`` if the dataset root or the pretrained weights cannot be read here."""
    check_dataset(spec.dataset)
    check_pretrained(spec.model)

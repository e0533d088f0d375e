"""Driver-side checks of a study's inputs, run before anything is written or Ray starts."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from trainables.data import check_dataset, train_class_count
from trainables.data.folds import check_batch_classes, check_validation
from trainables.models import check_pretrained
from trainables.schema.errors import DataError
from trainables.schema.spec import param_extremes
from trainables.schema.trial import param_path

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = ["check_inputs", "check_class_counts"]

#: The spec keys the class-count rules read; a searched one is checked at each end of its range.
_CLASS_RULE_KEYS = (
    ("train", "classes_per_batch"),
    ("validation", "kind"),
    ("validation", "folds"),
    ("validation", "fraction"),
)


def check_inputs(spec: StudySpec) -> None:
    """Raise a one-line ``DataError`` if the dataset root or the pretrained weights cannot be read here, or if
    the training classes cannot fill a P×K batch or form the validation groups the spec asks for."""
    check_dataset(spec.dataset)
    check_pretrained(spec.model)
    check_class_counts(spec)


def check_class_counts(spec: StudySpec) -> None:
    """The trials' class-count rules (:func:`~trainables.data.folds.check_batch_classes`,
    :func:`~trainables.data.folds.check_validation`) on the dataset's training classes, for every combination
    of the values P and the validation settings reach (a searched one at the ends of its range)."""
    num_classes = train_class_count(spec.dataset)
    reachable = {key: _reachable(spec, key) for key in _CLASS_RULE_KEYS}
    for combo in itertools.product(*(values for values, _ in reachable.values())):
        values = dict(zip(reachable, combo, strict=True))
        # Through the schema, so a searched value is read as a trial reads it ("5" → 5).
        train = type(spec.train).model_validate(
            {**spec.train.model_dump(), "classes_per_batch": values[("train", "classes_per_batch")]}
        )
        validation = type(spec.validation).model_validate(
            {**spec.validation.model_dump(), **{key[1]: v for key, v in values.items() if key[0] == "validation"}}
        )
        try:
            # The final stage (and validation.kind: none) trains on every training class; folds on fewer.
            check_batch_classes(num_classes, train.classes_per_batch, spec.dataset.name)
            check_validation(num_classes, validation, train.classes_per_batch, spec.dataset.name)
        except DataError as e:
            searched = [f"{where}={values[key]}" for key, (_, where) in reachable.items() if where]
            raise DataError(f"{e} (at {', '.join(searched)})" if searched else str(e)) from None


def _reachable(spec: StudySpec, key: tuple[str, ...]) -> tuple[list[Any], str]:
    """The values ``key`` takes in the study: a searched entry's extremes (and its name), else the fixed value."""
    for name, param in spec.search.space.items():
        if param_path(name) == key:
            return param_extremes(param), f"search.space.{name}"
    node: Any = spec
    for part in key:
        node = getattr(node, part)
    return [node], ""

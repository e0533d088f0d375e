"""``search.replicates: {min: m, max: M}``: a table's replicates where the verdict is open (docs/notebook/tables.md, "Replicates
where the verdict is open"). Every arm × condition first runs ``min`` whole-search replicates; after each round a
comparison is decided by the sequential rule (:mod:`study.final.sequential`) or stays open, and a cell gets another
replicate only while a comparison it belongs to is open, up to ``max``.

An integer ``replicates`` stays what it was (a fixed R, dumped as the integer). A study has no comparison to decide,
so it refuses the mapping (:func:`check_study_replicates`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, model_validator

from trainables.schema._strict import _Strict

__all__ = ["ReplicateRange", "Replicates", "REPLICATE_TAGS", "check_study_replicates", "replicate_bounds"]

#: The tags of :data:`Replicates`' two forms, which pydantic puts into an error's location (left out of the key a
#: spec error names: :func:`trainables.schema.trial.spec_error`); no spec key is spelled like either.
REPLICATE_TAGS = ("int", "{min, max}")


class ReplicateRange(_Strict):
    """Replicates by round: ``min`` per cell first, then one more per round while a comparison of the cell is open,
    at most ``max`` (the sequential rule's looks: ``max − min + 1``)."""

    #: The replicates every cell runs before the first look (2 or more: a replicate part needs 2 replicates); when left
    #: out, 3, or ``max`` if smaller: at 2 the first look decided nothing on the verdicts benchmark, one degree of
    #: freedom per arm (docs/notebook/selection.md).
    min: int = Field(default=3, ge=2)
    #: The most replicates a cell runs: at ``max`` an open comparison is ``not detectable at this budget``.
    max: int = Field(ge=2)

    @model_validator(mode="before")
    @classmethod
    def _default_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min" not in data and isinstance(data.get("max"), int):
            return {**data, "min": min(3, data["max"])}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> ReplicateRange:
        if self.min > self.max:
            raise ValueError(f"min <= max must hold, but got min={self.min}, max={self.max}")
        return self


def _kind(value: Any) -> str:
    """Which form ``search.replicates`` takes: a mapping (or a parsed range) is a range, anything else a count."""
    return REPLICATE_TAGS[1] if isinstance(value, dict | ReplicateRange) else REPLICATE_TAGS[0]


#: A table's ``search.replicates``: a fixed count, or a ``{min, max}`` range (its errors name the range's keys).
Replicates = Annotated[
    Annotated[Annotated[int, Field(ge=1)], Tag(REPLICATE_TAGS[0])] | Annotated[ReplicateRange, Tag(REPLICATE_TAGS[1])],
    Discriminator(_kind),
]


def replicate_bounds(replicates: int | ReplicateRange) -> tuple[int, int]:
    """``(min, max)`` replicates per cell: ``(R, R)`` for a fixed R."""
    if isinstance(replicates, ReplicateRange):
        return replicates.min, replicates.max
    return replicates, replicates


def check_study_replicates(value: Any) -> Any:
    """A study's ``search.replicates`` before validation: a mapping is a table's (it needs comparisons), refused in one
    line naming the key."""
    if isinstance(value, dict):
        raise ValueError(
            "{min, max} decides a table's comparisons round by round, and a study has none; give an integer (a "
            "fixed number of replicates)"
        )
    return value

"""The strictness every spec section shares: unknown keys, NaN/infinite floats and integers beyond 64 bits are
errors, and a parsed section is frozen."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Seed", "_Strict", "_check_scalars"]


#: Every integer of a spec fits a signed 64-bit integer (numpy, torch, sqlite and MLflow store them as such).
_INT64_MAX = 2**63 - 1
#: Seeds feed ``numpy.random.seed`` and Optuna's ``RandomState``: ``0 <= seed < 2**32``.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


def _check_scalars(value: Any, where: str = "") -> None:
    """Reject what no setting means: an integer beyond 64 bits, or a NaN/infinite float, at any depth
    (``where`` names the item inside the field: ``ms_beta``, ``choices[1]``)."""
    at = f"{where} " if where else ""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ValueError(f"{at}must fit in 64 bits (|x| < 2**63), but got {float(value):.3g}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{at}must be a finite number, but got {value}")
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_scalars(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_scalars(item, f"{where}.{key}" if where else str(key))


class _Strict(BaseModel):
    # allow_inf_nan=False: a float field refuses NaN and ±inf (pydantic accepts them by default).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _finite_and_64_bit(cls, value: Any) -> Any:
        # Typed float fields are covered by allow_inf_nan; this catches huge ints and free-form values (params).
        _check_scalars(value)
        return value

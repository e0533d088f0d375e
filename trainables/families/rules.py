"""The torch-free half of a loss family: its name, ``Params``, reported metrics and spec rules."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import Field, TypeAdapter, ValidationError

__all__ = ["FamilyRules", "Positive", "NonNegative", "PositiveInt", "OpenUnit", "Unbounded"]

#: Per-value bounds for ``Params`` fields, checked when a spec's params are parsed (and at every search-range
#: end, since the spec layer resolves a trial there): ``temperature: Positive = 0.5``.
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
PositiveInt = Annotated[int, Field(ge=1)]
OpenUnit = Annotated[float, Field(gt=0, lt=1)]


@dataclass(frozen=True)
class Unbounded:
    """Marks a numeric ``Params`` field that takes any value on purpose, and says why:
    ``ms_base: Annotated[float, Unbounded("an offset: ...")] = 1.0``. Pydantic ignores it; the family contract
    test requires every numeric field to carry a bound or this marker."""

    why: str


class FamilyRules:
    """What the spec layer knows about a family: its name, ``Params`` (the paper's defaults, each field bounded),
    the metrics it reports beyond the shared ones, and its cross-parameter and model rules.

    The family's torch class (:class:`trainables.families.base.BaseLossFamily`) subclasses its rules and adds none: a rule
    here is checked when the spec loads, before anything starts, and holds for every trial the spec can make.
    """

    name: ClassVar[str]
    Params: ClassVar[type]
    #: Per-epoch metrics this family reports beyond the shared ones (so specs may optimise them).
    metric_names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_spec(cls, params: Any, extremes: dict[str, list[Any]]) -> None:
        """Cross-parameter rules, checked when a spec loads (default: none). Per-value bounds belong on the
        ``Params`` fields (:data:`Positive`, ...), which every parse and every probed range end checks.

        ``params`` are the fixed values (defaults filled in); ``extremes`` maps every parameter name to the values
        it can reach at its extremes: ``[fixed value]``, or a searched range's ``[low, high]`` (a categorical's
        choices). Raise ``ValueError`` with one line naming the rule and the values.
        """
        del params, extremes

    @classmethod
    def check_model(cls, params: Any, embedding_dim: int) -> None:
        """Rules on the model the family needs (DiVA: room for four heads); ``ValueError`` as in check_spec."""
        del params, embedding_dim

    @classmethod
    def parse_params(cls, values: dict[str, Any]) -> Any:
        """The frozen ``Params`` from a spec's ``params`` mapping: names, types and per-value bounds checked.

        Raises ``ValueError`` with one line naming the parameter (``params.tau_plus: ... (got 1.0)``).
        """
        names = cls.param_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ValueError(
                f"unknown parameter params.{unknown[0]} for family {cls.name!r}; known: {', '.join(names)}"
            )
        try:
            return TypeAdapter(cls.Params).validate_python(dict(values))
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"params.{loc}: {err['msg']} (got {err.get('input')!r})") from None

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls.Params))

"""Each loss family's ``Params`` and spec rules, without torch.

A spec error in a family's own parameters (``params.ms_alpha: -1``, a searched range past a bound, DiVA's heads on
too small an embedding) must come back as one line in a fraction of a second, before anything starts. So every
family's ``Params`` dataclass and its rules (:class:`FamilyRules`: ``name``, ``metric_names``, ``check_spec``,
``check_model``, ``parse_params``) live in ``trainables/params/<module>.py``, which import pydantic only; the
family's torch module (``trainables/<module>.py``) subclasses its rules, and :func:`trainables.registry.get_rules`
returns them without importing the family. ``tests/trainables/test_family_contract.py`` checks that a family adds
no rule of its own and that every ``Params`` field is bounded or says why it is not (:class:`Unbounded`).
"""

from __future__ import annotations

from trainables.params._rules import (
    FamilyRules,
    NonNegative,
    OpenUnit,
    Positive,
    PositiveInt,
    Unbounded,
)

__all__ = ["FamilyRules", "Positive", "NonNegative", "PositiveInt", "OpenUnit", "Unbounded"]

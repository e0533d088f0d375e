"""Name → loss family, found from the folders under ``trainables/families/``: adding a family is one folder.

A family folder holds ``params.py`` (its torch-free ``Params`` and :class:`~trainables.families.rules.FamilyRules`
subclass, which sets ``name``) and ``loss.py`` (the torch module, whose family class subclasses those rules). The
registry knows no family by a string of its own: :func:`get_rules` collects every rules class that a folder's
``params.py`` defines (torch-free, so validating a spec imports no torch), and :func:`get_family` imports that
folder's ``loss.py`` and returns the family class that subclasses the rules and carries the same name.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING, TypeVar, cast

import trainables.families
from trainables.families.rules import FamilyRules

if TYPE_CHECKING:
    from types import ModuleType

    from trainables.families.base import BaseLossFamily

__all__ = ["FAMILY_NAMES", "get_family", "get_rules", "family_param_names"]

_T = TypeVar("_T")


def _defined_here(module: ModuleType, base: type[_T]) -> list[type[_T]]:
    """Classes that ``module`` itself defines (not imports) and that subclass ``base`` and set a ``name``."""
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, base)
        and obj.__module__ == module.__name__
        and isinstance(getattr(obj, "name", None), str)
    ]


@functools.cache
def _rules_by_name() -> dict[str, type[FamilyRules]]:
    found: dict[str, type[FamilyRules]] = {}
    for folder in pkgutil.iter_modules(trainables.families.__path__):
        if folder.ispkg:
            params = importlib.import_module(f"{trainables.families.__name__}.{folder.name}.params")
            for rules in _defined_here(params, FamilyRules):
                if rules.name in found:
                    raise RuntimeError(f"loss family {rules.name!r} is defined twice: {found[rules.name]} and {rules}")
                found[rules.name] = rules
    return dict(sorted(found.items()))


FAMILY_NAMES: tuple[str, ...] = tuple(_rules_by_name())


def get_rules(name: str) -> type[FamilyRules]:
    """The torch-free rules of family ``name`` (its ``Params``, ``metric_names``, ``check_spec``, ...); ``KeyError``
    if there is none. The family class subclasses them (``tests/trainables/families/test_family_contract.py``)."""
    return _rules_by_name()[name]


def get_family(name: str) -> type[BaseLossFamily]:
    """Return the family class registered as ``name``; ``KeyError`` if there is none."""
    from trainables.families.base import BaseLossFamily  # torch: only when a family is built

    rules = get_rules(name)
    loss = importlib.import_module(rules.__module__.rsplit(".", 1)[0] + ".loss")
    matches: list[type[BaseLossFamily]] = []
    for family in _defined_here(loss, cast("type[BaseLossFamily]", BaseLossFamily)):  # cast: the base is abstract
        if family.name == name and issubclass(family, rules):
            matches.append(family)
    if len(matches) != 1:
        raise KeyError(f"{loss.__name__} defines {len(matches)} family classes named {name!r} (expected one)")
    return matches[0]


def family_param_names(name: str) -> tuple[str, ...] | None:
    """The parameter names of family ``name`` (``None`` for an unknown name; the spec layer reports it)."""
    return get_rules(name).param_names() if name in _rules_by_name() else None

"""Name → loss family. Adding a family is one module plus its rules (``trainables/params/<module>.py``) and one
line in ``_FAMILY_MODULES``.

:func:`get_rules` returns a family's torch-free rules (``Params``, ``metric_names``, ``check_spec``, ...) from
``trainables.params.<module>`` without importing the family's torch module; :func:`get_family` imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainables.base import BaseLossFamily
    from trainables.params import FamilyRules

__all__ = ["FAMILY_NAMES", "get_family", "get_rules", "family_param_names"]

# Imported lazily so that validating a spec loads only the rules of the family it names, and no torch.
# name → (family module, family class, rules class in ``trainables.params.<same module>``).
_FAMILY_MODULES: dict[str, tuple[str, str, str]] = {
    "ms": ("ms", "MultiSimilarityFamily", "MSRules"),
    "bspml": ("bspml", "BSPMLFamily", "BSPMLRules"),
    "spms": ("bspml", "SelfPacedMSFamily", "SPMSRules"),
    "spl": ("spl", "SPLFamily", "SPLRules"),
    "contrastive": ("contrastive", "ContrastiveFamily", "ContrastiveRules"),
    "triplet": ("triplet", "TripletFamily", "TripletRules"),
    "triplet_smooth": ("triplet", "TripletSmoothFamily", "TripletSmoothRules"),
    "margin": ("margin", "MarginFamily", "MarginRules"),
    "marginal": ("margin", "MarginalFamily", "MarginalRules"),
    "fastap": ("fastap", "FastAPFamily", "FastAPRules"),
    "proxy_anchor": ("proxy_anchor", "ProxyAnchorFamily", "ProxyAnchorRules"),
    "snr": ("snr", "SNRFamily", "SNRRules"),
    "rdml": ("rdml", "RDMLFamily", "RDMLRules"),
    "npair": ("debiased", "NPairFamily", "NPairRules"),
    "debiased_neg": ("debiased", "DebiasedNegFamily", "DebiasedNegRules"),
    "debiased_pos": ("debiased", "DebiasedPosFamily", "DebiasedPosRules"),
    "hcl": ("debiased", "HCLFamily", "HCLRules"),
    "kl_contrastive": ("kl_contrastive", "KLContrastiveFamily", "KLContrastiveRules"),
    "diva": ("diva", "DiVAFamily", "DiVARules"),
    "prism": ("prism", "PrismFamily", "PrismRules"),
    "knn_rejection": ("knn_rejection", "KnnRejectionFamily", "KnnRejectionRules"),
}

FAMILY_NAMES: tuple[str, ...] = tuple(_FAMILY_MODULES)


def get_family(name: str) -> type[BaseLossFamily]:
    """Return the family class registered as ``name``; ``KeyError`` if there is none."""
    module, class_name, _ = _FAMILY_MODULES[name]
    return getattr(importlib.import_module(f"trainables.{module}"), class_name)


def get_rules(name: str) -> type[FamilyRules]:
    """The torch-free rules of family ``name`` (its ``Params``, ``metric_names``, ``check_spec``, ...); ``KeyError``
    if there is none. The family class subclasses them (``tests/trainables/test_family_contract.py``)."""
    module, _, rules_name = _FAMILY_MODULES[name]
    return getattr(importlib.import_module(f"trainables.params.{module}"), rules_name)


def family_param_names(name: str) -> tuple[str, ...] | None:
    """The parameter names of family ``name`` (``None`` for an unknown name; the spec layer reports it)."""
    return get_rules(name).param_names() if name in _FAMILY_MODULES else None

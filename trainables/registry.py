"""Name → loss family. Adding a family is one module plus one line in ``_FAMILY_MODULES``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainables.base import BaseLossFamily

__all__ = ["FAMILY_NAMES", "get_family", "family_param_names"]

# Imported lazily so that validating a spec loads only the family it names.
_FAMILY_MODULES: dict[str, tuple[str, str]] = {
    "ms": ("trainables.ms", "MultiSimilarityFamily"),
    "bspml": ("trainables.bspml", "BSPMLFamily"),
    "spms": ("trainables.bspml", "SelfPacedMSFamily"),
    "spl": ("trainables.spl", "SPLFamily"),
    "contrastive": ("trainables.contrastive", "ContrastiveFamily"),
    "triplet": ("trainables.triplet", "TripletFamily"),
    "triplet_smooth": ("trainables.triplet", "TripletSmoothFamily"),
    "margin": ("trainables.margin", "MarginFamily"),
    "marginal": ("trainables.margin", "MarginalFamily"),
    "fastap": ("trainables.fastap", "FastAPFamily"),
    "proxy_anchor": ("trainables.proxy_anchor", "ProxyAnchorFamily"),
    "snr": ("trainables.snr", "SNRFamily"),
    "rdml": ("trainables.rdml", "RDMLFamily"),
    "npair": ("trainables.debiased", "NPairFamily"),
    "debiased_neg": ("trainables.debiased", "DebiasedNegFamily"),
    "debiased_pos": ("trainables.debiased", "DebiasedPosFamily"),
    "hcl": ("trainables.debiased", "HCLFamily"),
    "kl_contrastive": ("trainables.kl_contrastive", "KLContrastiveFamily"),
    "diva": ("trainables.diva", "DiVAFamily"),
    "prism": ("trainables.prism", "PrismFamily"),
    "knn_rejection": ("trainables.knn_rejection", "KnnRejectionFamily"),
}

FAMILY_NAMES: tuple[str, ...] = tuple(_FAMILY_MODULES)


def get_family(name: str) -> type[BaseLossFamily]:
    """Return the family class registered as ``name``; ``KeyError`` if there is none."""
    module_name, class_name = _FAMILY_MODULES[name]
    return getattr(importlib.import_module(module_name), class_name)


def family_param_names(name: str) -> tuple[str, ...] | None:
    """The parameter names of family ``name`` (``None`` for an unknown name; the spec layer reports it)."""
    return get_family(name).param_names() if name in _FAMILY_MODULES else None

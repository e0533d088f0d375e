"""``npair``'s, ``debiased_neg``'s, ``debiased_pos``'s and ``hcl``'s parameters (the two-view contrastive losses
of :mod:`trainables.families.debiased.loss`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainables.families.rules import FamilyRules, NonNegative, OpenUnit, Positive

__all__ = [
    "NPairParams",
    "DebiasedParams",
    "DebiasedPosParams",
    "HCLParams",
    "NPairRules",
    "DebiasedNegRules",
    "DebiasedPosRules",
    "HCLRules",
]


@dataclass(frozen=True)
class NPairParams:
    """Hyperparameters of InfoNCE / NT-Xent.

    Args:
        temperature: ``t`` in ``s = f(x)ᵀf(y) / t`` (0.5, SimCLR's CIFAR-10 value).
    """

    temperature: Positive = 0.5


@dataclass(frozen=True)
class DebiasedParams:
    """Hyperparameters of the debiased contrastive losses.

    Args:
        temperature: ``t`` (0.5, as for ``npair``); also sets the floor ``e^{−1/t}``.
        tau_plus: ``τ⁺``, the class prior: the probability that a "negative" shares the anchor's class
            (0.1 = ten balanced classes, CIFAR-10); must lie in (0, 1).
    """

    temperature: Positive = 0.5
    tau_plus: OpenUnit = 0.1


@dataclass(frozen=True)
class DebiasedPosParams(DebiasedParams):
    """``L_Pos``'s hyperparameters.

    Args:
        self_term: keep the anchor's own ``e^{f(x)ᵀf(x)/t}`` in ``P_emp`` (Eq. 23 as written, default) or drop it
            and average over the N + 1 other embeddings (``false``; InfoNCE at ``τ⁺ = 1/(N+1)``).
    """

    self_term: bool = True


@dataclass(frozen=True)
class HCLParams:
    """Hyperparameters of hard-negative debiased contrastive learning (Robinson et al., ICLR 2021).

    Args:
        temperature: ``t`` (0.5, the official code's default, as for ``npair``).
        tau_plus: ``τ⁺``, the class prior of the debiasing (0.1, the official CIFAR-10/STL-10 runs); in (0, 1).
        beta: ``β``, the concentration of the hardness weights ``e^{β·s}`` (1.0, the official ``launch.sh``);
            0 turns the reweighting off (``L_Neg``).
    """

    temperature: Positive = 0.5
    tau_plus: OpenUnit = 0.1
    beta: NonNegative = 1.0


class NPairRules(FamilyRules):
    name = "npair"
    Params: ClassVar[type] = NPairParams


class DebiasedNegRules(FamilyRules):
    name = "debiased_neg"
    Params: ClassVar[type] = DebiasedParams


class DebiasedPosRules(FamilyRules):
    name = "debiased_pos"
    Params: ClassVar[type] = DebiasedPosParams


class HCLRules(FamilyRules):
    name = "hcl"
    Params: ClassVar[type] = HCLParams

"""``kl_contrastive``'s parameters: the debiased-contrastive thesis' 2-D experiment loss (§4.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from trainables.families.rules import FamilyRules, NonNegative, OpenUnit, Positive

__all__ = ["KLContrastiveParams", "KLContrastiveRules", "ContrastiveLoss"]

ContrastiveLoss = Literal["npair", "debiased_neg", "debiased_pos", "hcl"]


@dataclass(frozen=True)
class KLContrastiveParams:
    """Hyperparameters of the thesis' 2-D experiment loss (§4.1).

    Args:
        loss: the contrastive part: ``npair`` (Eq. 2, 12), ``debiased_neg`` (``L_Neg``, Eq. 15-16), ``debiased_pos``
            (``L_Pos``, Eq. 22-24; the thesis' contribution, default) or ``hcl`` (Robinson et al. 2021, Sec. 3).
        temperature: ``t`` of the contrastive part (0.5, SimCLR's value; the thesis gives none for §4.1).
        tau_plus: ``τ⁺`` of ``debiased_neg``/``debiased_pos``/``hcl`` (0.1; the thesis gives none for §4.1).
        beta: ``β`` of ``hcl`` (1.0, Robinson et al.'s official runs); read by ``hcl`` only.
        kl_weight: weight of the KL term (1.0: the thesis adds it unweighted).
        self_term: ``debiased_pos`` only: keep the anchor's own term in Eq. 23's ``P_emp`` (default, as written)
            or drop it (``false``: over N + 1; see :func:`~trainables.families.debiased.loss.debiased_pos_loss`).
    """

    loss: ContrastiveLoss = "debiased_pos"
    temperature: Positive = 0.5
    tau_plus: OpenUnit = 0.1
    beta: NonNegative = 1.0
    kl_weight: NonNegative = 1.0
    self_term: bool = True


class KLContrastiveRules(FamilyRules):
    name = "kl_contrastive"
    Params: ClassVar[type] = KLContrastiveParams

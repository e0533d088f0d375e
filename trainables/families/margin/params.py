"""``margin``'s and ``marginal``'s parameters (Wu et al.'s margin loss; the noise paper's marginal loss)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainables.families.rules import FamilyRules, NonNegative, Positive

__all__ = ["MarginParams", "MarginalParams", "MarginRules", "MarginalRules"]


@dataclass(frozen=True)
class MarginParams:
    """Hyperparameters of Wu et al.'s margin loss (their Sec. 5 defaults).

    Args:
        margin: α of Eq. 3 (0.2).
        beta_init: initial value of every class's learnable boundary β(i) (1.2), a distance: > 0.
        beta_lr: β's own learning rate (5e-4; the value commonly used with Wu et al.'s loss, e.g. Roth et al.
            2020, https://arxiv.org/abs/2002.08473 — Wu et al. do not state one); 0 keeps β fixed.
        cutoff: distance-weighted sampling clips distances below this before weighting (0.5; > 0, as the
            weight ``q(d)^{-1}`` diverges at 0).
        nonzero_loss_cutoff: only negatives closer than this are sampled (1.4).
    """

    margin: NonNegative = 0.2
    beta_init: Positive = 1.2
    beta_lr: NonNegative = 5.0e-4
    cutoff: Positive = 0.5
    nonzero_loss_cutoff: Positive = 1.4


@dataclass(frozen=True)
class MarginalParams:
    """Hyperparameters of the noise paper's marginal loss (Sec. 6.1 "Loss parameters").

    Args:
        beta: β, the fixed boundary between positive and negative distances (1.4).
        alpha: α, the margin on both sides of β (0.2); also the random semi-hard window.
    """

    beta: Positive = 1.4
    alpha: NonNegative = 0.2


class MarginRules(FamilyRules):
    name = "margin"
    Params: ClassVar[type] = MarginParams


class MarginalRules(FamilyRules):
    name = "marginal"
    Params: ClassVar[type] = MarginalParams

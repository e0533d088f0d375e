"""``diva``'s parameters (Milbich et al., ECCV 2020, Eq. 7) and its rule on the embedding size (four heads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from trainables.families.rules import FamilyRules, NonNegative, Positive, PositiveInt

__all__ = ["DiVAParams", "DiVARules", "HEADS", "MIN_HEAD_DIM"]

#: Task heads, in the order their chunks sit in the model's embedding.
HEADS = ("disc", "shared", "intra", "dance")
MIN_HEAD_DIM = 4  # q(d) needs D > 3


@dataclass(frozen=True)
class DiVAParams:
    """Hyperparameters of DiVA (paper defaults: ResNet-50 on CUB-200-2011, Tab. 1 and Sec. 4).

    Args:
        alpha: α_i of Eq. 7, one weight for the shared, intra-class and DaNCE tasks (0.3).
        rho: ρ of Eq. 7, one decorrelation weight for every pair in P (1500).
        temperature: τ of DaNCE (0.01).
        margin: γ of the margin loss, every task (0.2).
        beta_init: initial β of the margin loss (1.2); learnable per class in ``L_disc``, fixed in shared/intra.
        beta_lr: learning rate of ``L_disc``'s β (5e-4, as the ``margin`` family); 0 keeps β fixed.
        cutoff: distances are clipped below at this before distance weighting (0.5).
        nonzero_loss_cutoff: samples farther than this are never drawn / weigh 0 in DaNCE (1.4).
        queue_size: number of keys in DaNCE's memory queue (4096; MoCo uses 65536).
        ema_momentum: μ of the key encoder's running average (0.9), in [0, 1].
        weight_cap: λ of ``w(d) = min(λ, q(d)^{-1})``, on weights rescaled to mean 1 per anchor (1: no negative
            logit is amplified beyond plain NCE, the easy ones are damped towards 0).
        decorrelation_hidden: width of the hidden layer of each ψ (512).
        margin_divisor: what the summed margin-loss terms are divided by: ``per_triplet`` (default), the number of
            triplets with a positive or a negative violation, as the official code computes on PyTorch ≥ 1.2;
            ``per_term``, the number of violated terms, as pytorch-metric-learning's ``MarginLoss``.
    """

    alpha: NonNegative = 0.3
    rho: NonNegative = 1500.0
    temperature: Positive = 0.01
    margin: NonNegative = 0.2
    beta_init: Positive = 1.2
    beta_lr: NonNegative = 5.0e-4
    cutoff: Positive = 0.5
    nonzero_loss_cutoff: Positive = 1.4
    queue_size: PositiveInt = 4096
    ema_momentum: Annotated[float, Field(ge=0, le=1)] = 0.9
    weight_cap: Positive = 1.0
    decorrelation_hidden: PositiveInt = 512
    margin_divisor: Literal["per_triplet", "per_term"] = "per_triplet"


class DiVARules(FamilyRules):
    name = "diva"
    Params: ClassVar[type] = DiVAParams

    @classmethod
    def check_model(cls, params: Any, embedding_dim: int) -> None:
        if embedding_dim < MIN_HEAD_DIM * len(HEADS):
            raise ValueError(
                f"model.embedding_dim >= {MIN_HEAD_DIM * len(HEADS)} must hold for DiVA's four heads, got {embedding_dim}"
            )

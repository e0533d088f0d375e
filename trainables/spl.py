"""Classic self-paced learning on the MS loss (family ``spl``): the baseline BSPML generalises.

Kumar, Packer, Koller, "Self-Paced Learning for Latent Variable Models", NeurIPS 2010: minimise
``Σ_i w_i L_i − λ Σ_i w_i`` over w ∈ [0, 1]^N, whose w-step is closed-form — ``w_i = 1`` if ``L_i ≤ λ`` else 0
(BSPML paper Eq. 1-2, https://arxiv.org/abs/2212.01848) — with an age λ that grows each round so harder samples
join. Here ``L_i`` is BSPML's per-sample MS loss ξ_i = ξ⁺_i + ξ⁻_i of Eq. 3 on the embedded training set, and
the θ-step is BSPML's weighted informative batch loss (Eq. 7) with these 0/1 weights: a sample and every pair
it forms leave the loss together. What SPL lacks and BSPML adds: the pairwise coupling of the weights inside Eq. 6
and the class-balance term μ. Everything else (schedule, θ-step, traces, checkpoints) is BSPML's family code.

``lambda_scale: relative`` (default) reads λ in units of the epoch's mean ξ, so λ = 1 keeps the samples whose
loss is below the training set's mean; ``absolute`` is Kumar's λ in loss units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from pydantic import Field

from schema import metric_names as names
from trainables.base import NonNegative, Positive, PositiveInt
from trainables.bspml import SelfPacedMSFamily
from trainables.self_paced import ms_terms

__all__ = ["SPLParams", "SPLFamily", "spl_weights"]


@dataclass(frozen=True)
class SPLParams:
    """Hyperparameters of SPL on the MS loss.

    Args:
        lambda0: initial age λ0 (capped at ``lambda_max``, as in BSPML).
        lambda_growth: after each round λ ← min(c·λ, λ∞) (Kumar et al. divide K by μ > 1: the same schedule).
        lambda_max: λ∞, the cap of the age.
        lambda_scale: ``relative`` (λ in units of the epoch's mean ξ) or ``absolute`` (λ in loss units).
        ms_alpha, ms_beta, ms_base, ms_epsilon: MS α, β, ρ (Eq. 3/7) and the mining margin ε (Eq. 4-5).
        epochs_per_round: θ-step epochs per round (a w-step follows each round).
        topk_negatives: ξ⁻ from the k most similar negatives only (null: all).
        chunk_size: rows of the similarity matrix computed at once in the w-step.
    """

    lambda0: Positive = 1.0
    lambda_growth: Annotated[float, Field(ge=1)] = 1.02
    lambda_max: Positive = 1.1
    lambda_scale: Literal["absolute", "relative"] = "relative"
    ms_alpha: Positive = 2.0
    ms_beta: Positive = 50.0
    ms_base: float = 1.0
    ms_epsilon: NonNegative = 0.1
    epochs_per_round: PositiveInt = 1
    topk_negatives: PositiveInt | None = None
    chunk_size: PositiveInt = 1024

    @property
    def initial_lambda(self) -> float:
        return min(self.lambda0, self.lambda_max)


def spl_weights(loss: torch.Tensor, lam: float) -> torch.Tensor:
    """The closed-form w-step of SPL (BSPML paper Eq. 2): 1 where the loss is at most λ, else 0."""
    return (loss <= lam).to(loss.dtype)


class SPLFamily(SelfPacedMSFamily):
    """SPL: hard 0/1 weights from a threshold λ on ξ, λ growing each round; BSPML's θ-step."""

    name = "spl"
    Params = SPLParams  # type: ignore[assignment]
    metric_names = (*(m for m in SelfPacedMSFamily.metric_names if not m.startswith("bspml/w_")),)

    def weight_step(self, embeddings: torch.Tensor) -> None:
        """w_i = [ξ_i ≤ λ] (Eq. 2), then λ ← min(c·λ, λ∞)."""
        prm = self.params
        labels = self.index.labels.to(embeddings.device)
        xi_pos, xi_neg = ms_terms(
            embeddings, labels, prm.ms_alpha, prm.ms_beta, prm.ms_base, prm.chunk_size, prm.topk_negatives
        )
        loss = (xi_pos + xi_neg).double()
        lam = float(self.lam)
        self.lam_absolute = lam * float(loss.mean()) if prm.lambda_scale == "relative" else lam
        self.weights.copy_(spl_weights(loss, self.lam_absolute))
        self.lam_used.fill_(lam)
        self.lam.fill_(min(prm.lambda_growth * lam, prm.lambda_max))
        self.rounds += 1

    def _solver_metrics(self) -> dict[str, float]:
        return {names.LAMBDA_ABSOLUTE: self.lam_absolute} if int(self.rounds) else {}

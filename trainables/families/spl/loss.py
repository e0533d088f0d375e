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

import torch

from trainables.families.bspml.loss import SelfPacedMSFamily
from trainables.families.spl.params import SPLParams, SPLRules
from trainables.schema import metric_names as names

__all__ = ["SPLParams", "SPLFamily", "spl_weights"]


def spl_weights(loss: torch.Tensor, lam: float) -> torch.Tensor:
    """The closed-form w-step of SPL (BSPML paper Eq. 2): 1 where the loss is at most λ, else 0."""
    return (loss <= lam).to(loss.dtype)


# SPLParams is not an SPMSParams (it has no solver or balance fields, which SPL's own weight step never reads); it
# carries every SPMS field the inherited steps read, which tests/trainables/families/test_spl.py exercises.
class SPLFamily(SPLRules, SelfPacedMSFamily[SPLParams]):  # type: ignore[type-var]
    """SPL: hard 0/1 weights from a threshold λ on ξ, λ growing each round; BSPML's θ-step."""

    def weight_step(self, embeddings: torch.Tensor) -> None:
        """w_i = [ξ_i ≤ λ] (Eq. 2), then λ ← min(c·λ, λ∞)."""
        prm = self.params
        xi_pos, xi_neg, lam, self.lam_absolute = self.losses_and_age(embeddings)
        self.weights.copy_(spl_weights((xi_pos + xi_neg).double(), self.lam_absolute))
        self.lam_used.fill_(lam)
        self.lam.fill_(min(prm.lambda_growth * lam, prm.lambda_max))
        self.rounds += 1

    def _solver_metrics(self) -> dict[str, float]:
        return {names.LAMBDA_ABSOLUTE: self.lam_absolute} if int(self.rounds) else {}

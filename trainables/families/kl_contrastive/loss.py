"""A two-view contrastive loss plus a KL term pulling each view's raw embedding towards N(0, I) (family
``kl_contrastive``): the loss of the debiased-contrastive thesis' 2-D experiment.

``/work/shared/papers/unbiased-contrastive-learning-thesis-ru.txt`` §4.1: two encoders embed the two modalities
``a``, ``b`` made from one z ~ N(0, I); the loss has two parts.

- The contrastive part, on the L2-normalised outputs (it uses cosine similarity): ``L_N-pair`` (thesis Eq. 2, 12),
  ``L_Neg`` (Eq. 15-16), ``L_Pos`` (Eq. 22-24) or, beyond the thesis, HCL (Robinson et al., ICLR 2021, Sec. 3), the
  same functions as the ``npair``, ``debiased_neg``, ``debiased_pos`` and ``hcl`` families
  (:mod:`trainables.families.debiased.loss`). Logged under the loss' name.
- The KL part, on each encoder's *unnormalised* output (the thesis: "from the batch mean and its variance a
  normal distribution is formed and compared with the standard normal by the Kullback-Leibler divergence"):
  ``KL(N(μ, diag σ²) ‖ N(0, I)) = ½ Σ_d (σ_d² + μ_d² − 1 − log σ_d²)`` with μ, σ² the batch mean and (biased)
  variance of one view's outputs, summed over the two views and weighted by ``kl_weight`` (the thesis gives no
  weight: 1). Logged as ``kl_normal``. Without it the contrastive part fixes only the directions; the KL term
  sets the scale and centre, so the raw 2-D embedding can recover the shape of z's distribution.

The family declares ``raw_embeddings``: the loop's model does not normalise, and the retrieval metrics see the
normalised output (:meth:`KLContrastiveFamily.test_embedding`). On paired data (``flows2d``) the loop reports
``paired_mae``/``paired_cosine`` between the two views' raw outputs (Table 1's metrics).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses

from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.debiased.loss import debiased_neg_loss, debiased_pos_loss, hcl_loss
from trainables.families.kl_contrastive.params import KLContrastiveParams, KLContrastiveRules

__all__ = ["KLContrastiveFamily", "KLContrastiveParams", "kl_to_standard_normal", "KL_TERM"]

KL_TERM = "kl_normal"


def kl_to_standard_normal(raw: torch.Tensor) -> torch.Tensor:
    """``KL(N(μ, diag σ²) ‖ N(0, I))`` of the batch mean μ and biased variance σ² of ``raw`` (B, D)."""
    mu = raw.mean(dim=0)
    var = raw.var(dim=0, unbiased=False).clamp(min=1e-12)
    return 0.5 * (var + mu * mu - 1.0 - torch.log(var)).sum()


class KLContrastiveFamily(KLContrastiveRules, BaseLossFamily[KLContrastiveParams]):
    num_views = 2
    raw_embeddings = True

    def __init__(self, params: KLContrastiveParams, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        self.ntxent = losses.NTXentLoss(temperature=params.temperature)

    def contrastive(self, normalized: torch.Tensor) -> torch.Tensor:
        p: KLContrastiveParams = self.params
        if p.loss == "npair":
            ids = torch.arange(len(normalized) // 2, device=normalized.device).repeat(2)
            return self.ntxent(normalized, ids)
        if p.loss == "debiased_neg":
            return debiased_neg_loss(normalized, p.temperature, p.tau_plus)
        if p.loss == "debiased_pos":
            return debiased_pos_loss(normalized, p.temperature, p.tau_plus, p.self_term)
        return hcl_loss(normalized, p.temperature, p.tau_plus, p.beta)

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: KLContrastiveParams = self.params
        views = embeddings.chunk(2)  # view-major: the first modality's outputs, then the second's
        kl = sum((kl_to_standard_normal(v) for v in views), embeddings.sum() * 0)
        return {p.loss: self.contrastive(F.normalize(embeddings, dim=1)), KL_TERM: p.kl_weight * kl}

    def test_embedding(self, embeddings: torch.Tensor) -> torch.Tensor:
        return F.normalize(embeddings, dim=1)

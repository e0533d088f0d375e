"""kNN label-agreement rejection on the multi-similarity loss (family ``knn_rejection``).

After N2D2, Galanakis, Zabulis, Argyros, "Nearest Neighbor-Based Data Denoising for Deep Metric Learning",
VISAPP 2024 (https://www.scitepress.org/publishedPapers/2024/123830/): a sample is judged by the labels of its
nearest neighbours in the embeddings of the *whole training set* from the previous epoch, and a sample whose
neighbourhood disagrees with its label is left out of the current training step. Unlike PRISM it needs no noise
rate. Here (the paper builds on pytorch-metric-learning losses; we use MS, :mod:`trainables.families.ms.loss`):

1. at the end of every epoch, the loop's training-set embedding pass (the one BSPML's w-step and the noise
   detectors share) gives each sample's ``k`` nearest other samples (cosine, faiss;
   :func:`~trainables.families.noise_detectors.knn_score`); a sample is **kept** for the next epoch iff the share of
   them carrying its label is at least ``agreement`` (weight 1), else rejected (weight 0);
2. every batch mines MS's informative pairs (Eq. 4-5 of BSPML, PML's ``MultiSimilarityMiner``) on the whole batch,
   drops the pairs that touch a rejected sample, and applies PML's ``MultiSimilarityLoss`` to the rest, averaged
   over the whole batch (a rejected anchor contributes 0, as w = 0 does in BSPML's Eq. 7). Mining on the whole
   batch keeps the loop's miner diagnostics aligned with the batch; the first epoch keeps every sample.

The family never sees the true labels. :meth:`KnnRejectionFamily.sample_scores` is the label-agreement share
mapped piecewise linearly so that ``agreement`` sits at 0.5: ``score < 0.5`` is exactly the rejection, and
``noise_auroc`` is the AUROC of the kNN vote it acted on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from pytorch_metric_learning import losses, miners

from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.knn_rejection.params import KnnRejectionParams, KnnRejectionRules
from trainables.families.noise_detectors import knn_score
from trainables.schema import metric_names as names

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["KnnRejectionParams", "KnnRejectionFamily", "agreement_score", "drop_rejected_pairs"]


def agreement_score(agree: torch.Tensor, agreement: float) -> torch.Tensor:
    """The share of agreeing neighbours mapped to [0, 1] piecewise linearly with ``agreement ↦ 0.5``: monotone,
    and below 0.5 exactly for the rejected samples (``agree < agreement``)."""
    rejected = agree < agreement - 1e-9
    below = 0.5 * agree / agreement
    above = 0.5 + 0.5 * (agree - agreement) / (1.0 - agreement) if agreement < 1 else torch.ones_like(agree)
    return torch.where(rejected, below.clamp(max=0.5 - 1e-6), above.clamp(min=0.5)).float()


def drop_rejected_pairs(
    pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], keep: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mined pairs ``(a1, p, a2, n)`` (positions in the batch) whose two members are both kept."""
    a1, p, a2, n = pairs
    pos = keep[a1] & keep[p]
    neg = keep[a2] & keep[n]
    return a1[pos], p[pos], a2[neg], n[neg]


class KnnRejectionFamily(KnnRejectionRules, BaseLossFamily[KnnRejectionParams]):
    """MS on the samples whose previous-epoch neighbours agree with their label."""

    keep: torch.Tensor
    score: torch.Tensor

    def __init__(self, params: KnnRejectionParams, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        self.criterion = losses.MultiSimilarityLoss(alpha=params.ms_alpha, beta=params.ms_beta, base=params.ms_base)
        self.miner = miners.MultiSimilarityMiner(epsilon=params.ms_epsilon)
        self.register_buffer("keep", torch.ones(ctx.num_train, dtype=torch.bool, device=ctx.device))
        self.register_buffer("score", torch.ones(ctx.num_train, device=ctx.device))

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        pairs = self.miner(embeddings, batch.labels)
        kept = drop_rejected_pairs(pairs, self.keep[batch.indices])
        # PML returns an attached zero when no pair is left; its mean runs over the whole batch.
        return {self.name: self.criterion(embeddings, batch.labels, kept)}

    @torch.no_grad()
    def on_epoch_end(
        self, epoch: int, embed_train: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    ) -> dict[str, float]:
        del epoch
        embeddings, indices = embed_train()
        ordered = torch.empty_like(embeddings)
        ordered[indices] = embeddings
        k = min(self.params.k, self.ctx.num_train - 1)
        # The vote as a count of agreeing neighbours over k, so that "at least 7 of 10" is exact in floating point.
        agree = torch.round((1.0 - knn_score(ordered, self.ctx.train_labels, k).double()) * k) / k
        agree = agree.to(self.keep.device)
        self.keep.copy_(agree >= self.params.agreement - 1e-9)
        self.score.copy_(agreement_score(agree, self.params.agreement))
        rejected = float((~self.keep).float().mean())
        return {names.KNN_REJECTED_SHARE: rejected, names.EXCLUDED_SHARE: rejected}

    def sample_scores(self) -> torch.Tensor:
        """:func:`agreement_score` of the last vote (1 before the first epoch ended)."""
        return self.score

"""Contrastive loss on cosine similarity (family ``contrastive``), as the BSPML baselines run it.

Hadsell, Chopra & LeCun, "Dimensionality Reduction by Learning an Invariant Mapping", CVPR 2006; the BSPML
paper (https://arxiv.org/abs/2212.01848, Sec. 5 "Compared algorithms") runs it through
pytorch-metric-learning with positive margin 1 and negative margin 0. Those margins only make sense for a
*similarity*: PML's ``ContrastiveLoss`` computes ``[m_pos − s_ap]_+`` and ``[s_an − m_neg]_+`` when its
distance is inverted (``CosineSimilarity``), but ``[d_ap − m_pos]_+`` and ``[m_neg − d_an]_+`` with its default
``LpDistance``, where (1, 0) would never push a negative away. So the family uses cosine similarity: every
positive pair is pulled to similarity 1, every negative pair with similarity above 0 is pushed down; each
term is averaged over its pairs with non-zero loss (PML's default reducer), no miner (all pairs).
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from pytorch_metric_learning.distances import CosineSimilarity
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.contrastive.params import ContrastiveParams, ContrastiveRules

__all__ = ["ContrastiveFamily", "ContrastiveParams"]


class ContrastiveFamily(ContrastiveRules, PmlLossFamily[ContrastiveParams]):
    def build_criterion(self, params: ContrastiveParams) -> nn.Module:
        return losses.ContrastiveLoss(
            pos_margin=params.pos_margin, neg_margin=params.neg_margin, distance=CosineSimilarity()
        )

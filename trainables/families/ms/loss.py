"""Multi-similarity loss with MS informative-pair mining (family ``ms``).

Wang et al., "Multi-Similarity Loss with General Pair Weighting for Deep Metric Learning", CVPR 2019
(https://arxiv.org/abs/1904.06627); written as in BSPML (https://arxiv.org/abs/2212.01848) Eq. 3 (loss)
and Eq. 4-5 (mining). This is BSPML with every sample weight fixed at 1.
"""

from __future__ import annotations

from pytorch_metric_learning import losses, miners
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.ms.params import MSParams, MSRules

__all__ = ["MultiSimilarityFamily", "MSParams"]


class MultiSimilarityFamily(MSRules, PmlLossFamily[MSParams]):
    def build_criterion(self, params: MSParams) -> nn.Module:
        return losses.MultiSimilarityLoss(alpha=params.ms_alpha, beta=params.ms_beta, base=params.ms_base)

    def build_miner(self, params: MSParams) -> nn.Module:
        return miners.MultiSimilarityMiner(epsilon=params.ms_epsilon)

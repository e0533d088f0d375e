"""Multi-similarity loss with MS informative-pair mining (family ``ms``).

Wang et al., "Multi-Similarity Loss with General Pair Weighting for Deep Metric Learning", CVPR 2019
(https://arxiv.org/abs/1904.06627); written as in BSPML (https://arxiv.org/abs/2212.01848) Eq. 3 (loss)
and Eq. 4-5 (mining). This is BSPML with every sample weight fixed at 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytorch_metric_learning import losses, miners
from torch import nn

from trainables.base import PmlLossFamily

__all__ = ["MultiSimilarityFamily", "MSParams"]


@dataclass(frozen=True)
class MSParams:
    """Hyperparameters of the MS loss; defaults are the BSPML paper's experimental settings (Sec. 5).

    Args:
        ms_alpha: α, scale of the positive term of Eq. 3.
        ms_beta: β, scale of the negative term of Eq. 3.
        ms_base: ρ, the similarity offset of Eq. 3 (PML's ``base``).
        ms_epsilon: ε, the margin of the informative-pair rules Eq. 4-5.
    """

    ms_alpha: float = 2.0
    ms_beta: float = 50.0
    ms_base: float = 1.0
    ms_epsilon: float = 0.1


class MultiSimilarityFamily(PmlLossFamily):
    name = "ms"
    Params = MSParams

    def build_criterion(self, params: MSParams) -> nn.Module:
        return losses.MultiSimilarityLoss(alpha=params.ms_alpha, beta=params.ms_beta, base=params.ms_base)

    def build_miner(self, params: MSParams) -> nn.Module:
        return miners.MultiSimilarityMiner(epsilon=params.ms_epsilon)

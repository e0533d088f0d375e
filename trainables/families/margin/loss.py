"""Margin loss (families ``margin`` and ``marginal``).

``margin``: Wu, Manmatha, Smola & Krähenbühl, "Sampling Matters in Deep Embedding Learning", ICCV 2017
(https://arxiv.org/abs/1706.07567), Eq. 3-4: ``[α + y_ij (D_ij − β(i))]_+`` with a learnable boundary β per
class (initialised 1.2, with its own learning rate), margin α = 0.2, and distance-weighted negative sampling
(Sec. 4, ``q(d) ∝ d^{n−2}(1 − d²/4)^{(n−3)/2}``, distances clipped below at 0.5, only negatives closer than
the non-zero-loss cut-off 1.4). PML's ``MarginLoss`` + ``DistanceWeightedMiner``. β's regulariser ν is 0
(Wu et al. Eq. 5 with ν = 0, as in their experiments).

``marginal``: the "marginal loss" of the noise paper (``/work/shared/papers/embedding-losses-under-label-noise.txt``
Eq. 2, β fixed at 1.4, α = 0.2, Sec. 6.1) with random semi-hard pair sampling, the 1-1 scheme of Sec. 5.2
(one negative per positive pair, Eq. 28 of the triplet rules: ``d_an < d_ap + α``).
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning import losses, miners
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.margin.params import MarginalParams, MarginalRules, MarginParams, MarginRules
from trainables.families.triplet.loss import RandomSemiHardMiner

__all__ = ["MarginFamily", "MarginParams", "MarginalFamily", "MarginalParams"]


class MarginFamily(MarginRules, PmlLossFamily[MarginParams]):
    def build_criterion(self, params: MarginParams) -> nn.Module:
        num_classes = int(self.ctx.train_labels.max()) + 1 if len(self.ctx.train_labels) else 1
        return losses.MarginLoss(
            margin=params.margin, nu=0.0, beta=params.beta_init, learn_beta=True, num_classes=num_classes
        )

    def build_miner(self, params: MarginParams) -> nn.Module:
        return miners.DistanceWeightedMiner(cutoff=params.cutoff, nonzero_loss_cutoff=params.nonzero_loss_cutoff)

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        del lr
        return [{"params": list(self.parameters()), "lr": self.params.beta_lr}]


class MarginalFamily(MarginalRules, PmlLossFamily[MarginalParams]):
    def build_criterion(self, params: MarginalParams) -> nn.Module:
        return losses.MarginLoss(margin=params.alpha, nu=0.0, beta=params.beta, learn_beta=False)

    def build_miner(self, params: MarginalParams) -> nn.Module:
        return RandomSemiHardMiner(params.alpha)

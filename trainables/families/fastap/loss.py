"""FastAP (family ``fastap``): a histogram approximation of average precision over the batch.

Cakir, He, Xia, Kulis & Sclaroff, "Deep Metric Learning to Rank", CVPR 2019 (https://arxiv.org/abs/1906.08457),
Eq. 9-11; PML's ``FastAPLoss`` (squared Euclidean distances on the unit sphere, quantised into ``num_bins``
soft bins over [0, 4]). A BSPML baseline with 10 bins.
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.fastap.params import FastAPParams, FastAPRules

__all__ = ["FastAPFamily", "FastAPParams"]


class FastAPFamily(FastAPRules, PmlLossFamily[FastAPParams]):
    def build_criterion(self, params: FastAPParams) -> nn.Module:
        return losses.FastAPLoss(num_bins=params.num_bins)

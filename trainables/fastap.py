"""FastAP (family ``fastap``): a histogram approximation of average precision over the batch.

Cakir, He, Xia, Kulis & Sclaroff, "Deep Metric Learning to Rank", CVPR 2019 (https://arxiv.org/abs/1906.08457),
Eq. 9-11; PML's ``FastAPLoss`` (squared Euclidean distances on the unit sphere, quantised into ``num_bins``
soft bins over [0, 4]). A BSPML baseline with 10 bins.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytorch_metric_learning import losses
from torch import nn

from trainables.base import PmlLossFamily

__all__ = ["FastAPFamily", "FastAPParams"]


@dataclass(frozen=True)
class FastAPParams:
    """Args:
    num_bins: number of histogram bins of the distance quantisation (10 as in the BSPML baselines).
    """

    num_bins: int = 10


class FastAPFamily(PmlLossFamily):
    name = "fastap"
    Params = FastAPParams

    def build_criterion(self, params: FastAPParams) -> nn.Module:
        return losses.FastAPLoss(num_bins=params.num_bins)

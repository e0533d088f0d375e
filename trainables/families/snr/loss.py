"""Signal-to-noise-ratio contrastive loss (family ``snr``).

Yuan, Chen, Wang, Yu, Shi & Jiang, "Signal-to-Noise Ratio: A Robust Distance Metric for Deep Metric
Learning", CVPR 2019 (https://arxiv.org/abs/1904.02616), Eq. 5 (SNR distance ``Var(h_j − h_i) / Var(h_i)``)
and Eq. 8 (contrastive form); PML's ``SignalToNoiseRatioContrastiveLoss`` with its default margins, all pairs.
The paper's regulariser on the embedding mean (λ = 0.001·mean |Σ h|) is left out, as in the BSPML runs on PML.
"""

from __future__ import annotations

from pytorch_metric_learning import losses
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.snr.params import SNRParams, SNRRules

__all__ = ["SNRFamily", "SNRParams"]


class SNRFamily(SNRRules, PmlLossFamily[SNRParams]):
    def build_criterion(self, params: SNRParams) -> nn.Module:
        return losses.SignalToNoiseRatioContrastiveLoss(pos_margin=params.pos_margin, neg_margin=params.neg_margin)

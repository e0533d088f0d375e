"""Proxy-Anchor loss (family ``proxy_anchor``): one learnable proxy per class, each proxy an anchor.

Kim, Kim, Cho & Kwak, "Proxy Anchor Loss for Deep Metric Learning", CVPR 2020 (https://arxiv.org/abs/2003.13911),
Eq. 4; PML's ``ProxyAnchorLoss`` (proxies drawn from a normal distribution, Kaiming fan-out, as in the BSPML
baselines). The proxies are an ``nn.Parameter`` of the criterion, hence of the family: the loop optimises and
checkpoints them. As in the paper's code, the proxies learn ``proxy_lr_scale`` times faster than the network.
"""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning import losses
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.proxy_anchor.params import ProxyAnchorParams, ProxyAnchorRules

__all__ = ["ProxyAnchorFamily", "ProxyAnchorParams"]


class ProxyAnchorFamily(ProxyAnchorRules, PmlLossFamily[ProxyAnchorParams]):
    def build_criterion(self, params: ProxyAnchorParams) -> nn.Module:
        # Labels index the proxies, so there is one per label value (class ids need not be 0..C-1).
        num_classes = int(self.ctx.train_labels.max()) + 1 if len(self.ctx.train_labels) else 1
        return losses.ProxyAnchorLoss(
            num_classes=num_classes, embedding_size=self.ctx.embedding_dim, margin=params.delta, alpha=params.alpha
        )

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        return [{"params": list(self.parameters()), "lr": lr * self.params.proxy_lr_scale}]

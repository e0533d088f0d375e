"""``proxy_anchor``'s parameters (Kim et al., CVPR 2020, Eq. 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainables.families.rules import FamilyRules, NonNegative, Positive

__all__ = ["ProxyAnchorParams", "ProxyAnchorRules"]


@dataclass(frozen=True)
class ProxyAnchorParams:
    """Hyperparameters of Proxy-Anchor; defaults from the BSPML baselines (Sec. 5) and Kim et al. Sec. 4.

    Args:
        alpha: α, the scale of Eq. 4 (32).
        delta: δ, the margin of Eq. 4 (0.1).
        proxy_lr_scale: the proxies' learning rate as a multiple of ``train.optimizer.lr`` (100 in Kim et al.).
    """

    alpha: Positive = 32.0
    delta: NonNegative = 0.1
    proxy_lr_scale: Positive = 100.0


class ProxyAnchorRules(FamilyRules):
    name = "proxy_anchor"
    Params: ClassVar[type] = ProxyAnchorParams

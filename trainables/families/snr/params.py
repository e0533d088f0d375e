"""``snr``'s parameters: the margins on the SNR distance (Yuan et al., CVPR 2019, Eq. 8)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainables.families.rules import FamilyRules, NonNegative

__all__ = ["SNRParams", "SNRRules"]


@dataclass(frozen=True)
class SNRParams:
    """Margins on the SNR distance ``Var(h_j − h_i) / Var(h_i)`` (≥ 0, so are the margins; PML defaults, the SNR
    paper's contrastive setting).

    Args:
        pos_margin: positive pairs are penalised while their SNR distance exceeds this.
        neg_margin: negative pairs are penalised while their SNR distance is below this.
    """

    pos_margin: NonNegative = 0.0
    neg_margin: NonNegative = 1.0


class SNRRules(FamilyRules):
    name = "snr"
    Params: ClassVar[type] = SNRParams

"""``fastap``'s parameters: the histogram of FastAP (Cakir et al., CVPR 2019)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainables.families.rules import FamilyRules, PositiveInt

__all__ = ["FastAPParams", "FastAPRules"]


@dataclass(frozen=True)
class FastAPParams:
    """Args:
    num_bins: number of histogram bins of the distance quantisation (10 as in the BSPML baselines).
    """

    num_bins: PositiveInt = 10


class FastAPRules(FamilyRules):
    name = "fastap"
    Params: ClassVar[type] = FastAPParams

"""``triplet``'s and ``triplet_smooth``'s parameters: the margin and the miner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from trainables.families.rules import FamilyRules, NonNegative

__all__ = ["Mining", "TripletParams", "TripletSmoothParams", "TripletRules", "TripletSmoothRules"]

Mining = Literal["random_semihard", "fixed_semihard", "hard", "all"]


@dataclass(frozen=True)
class TripletParams:
    """Hyperparameters of the triplet family; defaults are the noise paper's (Sec. 6.1 "Loss parameters").

    Args:
        margin: α of Eq. 3 (0.2 in the paper); also the semi-hard window of Eq. 28 (≥ 0: a negative window
            selects nothing).
        mining: ``random_semihard`` (Eq. 28, the paper's robust choice) | ``fixed_semihard`` (Eq. 29) |
            ``hard`` (batch-hard) | ``all``.
    """

    margin: NonNegative = 0.2
    mining: Mining = "random_semihard"


@dataclass(frozen=True)
class TripletSmoothParams(TripletParams):
    """Hyperparameters of the soft-plus triplet loss (Hermans et al. 2017, Sec. 2 "soft-margin").

    Args:
        margin: α inside the soft-plus; 0 in Hermans et al. (the soft-plus replaces the margin).
        mining: as for ``triplet``; batch-hard (``hard``) in Hermans et al.
    """

    margin: NonNegative = 0.0
    mining: Mining = "hard"


class TripletRules(FamilyRules):
    name = "triplet"
    Params: ClassVar[type] = TripletParams


class TripletSmoothRules(TripletRules):
    name = "triplet_smooth"
    Params: ClassVar[type] = TripletSmoothParams

"""``rdml``'s parameters: the rescaled hinge (Xu et al. 2017, Eq. 9) on squared distances of unit vectors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from trainables.families.rules import FamilyRules, NonNegative, Positive

__all__ = ["RDMLParams", "RDMLRules"]


@dataclass(frozen=True)
class RDMLParams:
    """Hyperparameters of the rescaled-hinge pair loss.

    Args:
        eta: η of the rescaled hinge (BSPML searches {0.5, 1, 2, 3, 4}); larger saturates earlier (> 0: β_η =
            1 / (1 − e^{−η}) has a pole at 0).
        threshold: b, the squared distance separating similar from dissimilar pairs (2 = orthogonal; in [0, 4],
            the range of ``d²`` on the unit sphere).
        margin: the constraint margin on ``d²``: positives want ``d² ≤ b − margin``, negatives ``d² ≥ b + margin``.
    """

    eta: Positive = 1.0
    threshold: Annotated[float, Field(ge=0, le=4)] = 2.0
    margin: NonNegative = 0.5


class RDMLRules(FamilyRules):
    name = "rdml"
    Params: ClassVar[type] = RDMLParams

"""``contrastive``'s parameters: the margins of the contrastive loss on cosine similarity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from trainables.families.rules import FamilyRules

__all__ = ["ContrastiveParams", "ContrastiveRules", "CosineMargin"]

#: A threshold on cosine similarity: outside [-1, 1] a term is always or never active.
CosineMargin = Annotated[float, Field(ge=-1, le=1)]


@dataclass(frozen=True)
class ContrastiveParams:
    """Margins of the contrastive loss, on cosine similarity; defaults are the BSPML baselines' (Sec. 5).

    Args:
        pos_margin: positives are penalised while their similarity is below this.
        neg_margin: negatives are penalised while their similarity is above this.
    """

    pos_margin: CosineMargin = 1.0
    neg_margin: CosineMargin = 0.0


class ContrastiveRules(FamilyRules):
    name = "contrastive"
    Params: ClassVar[type] = ContrastiveParams

"""``ms``'s parameters: the multi-similarity loss and miner, shared by every family built on MS (``spms``,
``bspml``, ``spl``, ``knn_rejection``), so ``ms_alpha`` means and is checked the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from trainables.families.rules import FamilyRules, NonNegative, Positive, Unbounded

__all__ = ["MSParams", "MSRules"]


@dataclass(frozen=True)
class MSParams:
    """Hyperparameters of the MS loss (Wang et al., CVPR 2019, https://arxiv.org/abs/1904.06627, written as BSPML
    https://arxiv.org/abs/2212.01848 Eq. 3-5); defaults are the BSPML paper's experimental settings (Sec. 5).

    Args:
        ms_alpha: α, scale of the positive term of Eq. 3 (> 0: the term is ``(1/α) log(1 + Σ e^{−α(S−ρ)})``).
        ms_beta: β, scale of the negative term of Eq. 3 (> 0, as α).
        ms_base: ρ, the similarity offset of Eq. 3 (PML's ``base``).
        ms_epsilon: ε, the margin of the informative-pair rules Eq. 4-5 (≥ 0; 0 keeps the strictly violating
            pairs only).
    """

    ms_alpha: Positive = 2.0
    ms_beta: Positive = 50.0
    ms_base: Annotated[
        float, Unbounded("an offset on cosine similarity: every real value is a valid threshold (PML: any float)")
    ] = 1.0
    ms_epsilon: NonNegative = 0.1


class MSRules(FamilyRules):
    name = "ms"
    Params: ClassVar[type] = MSParams

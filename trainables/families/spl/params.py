"""``spl``'s parameters: classic self-paced learning (Kumar et al., NeurIPS 2010) on the MS loss, with BSPML's
schedule and its rule λ0 ≤ λ∞ (:class:`~trainables.families.bspml.params.SPMSRules`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from trainables.families.bspml.params import SPMSRules
from trainables.families.ms.params import MSParams
from trainables.families.rules import Positive, PositiveInt

__all__ = ["SPLParams", "SPLRules"]


@dataclass(frozen=True)
class SPLParams(MSParams):
    """Hyperparameters of SPL on the MS loss: :class:`MSParams` plus the age schedule.

    Args:
        lambda0: initial age λ0 (capped at ``lambda_max``, as in BSPML).
        lambda_growth: after each round λ ← min(c·λ, λ∞) (Kumar et al. divide K by μ > 1: the same schedule).
        lambda_max: λ∞, the cap of the age.
        lambda_scale: ``relative`` (λ in units of the epoch's mean ξ) or ``absolute`` (λ in loss units).
        epochs_per_round: θ-step epochs per round (a w-step follows each round).
        topk_negatives: ξ⁻ from the k most similar negatives only (null: all).
        chunk_size: rows of the similarity matrix computed at once in the w-step.
    """

    lambda0: Positive = 1.0
    lambda_growth: Annotated[float, Field(ge=1)] = 1.02
    lambda_max: Positive = 1.1
    lambda_scale: Literal["absolute", "relative"] = "relative"
    epochs_per_round: PositiveInt = 1
    topk_negatives: PositiveInt | None = None
    chunk_size: PositiveInt = 1024

    @property
    def initial_lambda(self) -> float:
        return min(self.lambda0, self.lambda_max)


class SPLRules(SPMSRules):
    """SPL: hard 0/1 weights from a threshold λ on ξ; BSPML's θ-step and schedule, without its solver's traces."""

    name = "spl"
    Params: ClassVar[type] = SPLParams
    metric_names = tuple(m for m in SPMSRules.metric_names if not m.startswith("bspml/w_"))

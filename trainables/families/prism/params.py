"""``prism``'s parameters (PRISM with the memory contrastive loss) and its rule: a fixed ``noise_rate`` excludes
``rate: estimated``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from trainables.families.rules import FamilyRules, NonNegative, PositiveInt
from trainables.schema import metric_names as names

__all__ = ["PrismParams", "PrismRules"]


@dataclass(frozen=True)
class PrismParams:
    """Hyperparameters of PRISM with the memory contrastive loss.

    Defaults are the authors' (repo ``configs/CARSN/MemoryContrastiveLossPRISM.yaml``, the one shipped config,
    and ``ret_benchmark/config/defaults.py``) where they give them.

    Args:
        noise_rate: R, the assumed noise rate: ``floor(R·n)`` samples of a batch are removal candidates
            (``NOISE.NOISE_RATE``; the paper sets it to the dataset's noise rate). ``null`` (default): the spec's
            ``dataset.noise.ratio``.
        window_size: length of the sliding window of thresholds (``NOISE.WINDOW_SIZE``: 30 in the CARS-98N config).
        warm_up: batches trained without selection (``NOISE.WARM_UP``: 0).
        memory_size: XBM's capacity in features (``XBM.SIZE``: 9500 in the CARS-98N config; 8192 by default).
        memory_start: batches trained on the batch loss alone before the memory is used or filled
            (``XBM.START_ITERATION``: 0 in the CARS-98N config).
        memory_weight: weight of the memory term (``XBM.WEIGHT``: 1). The memory needs slowly drifting features
            (a pretrained backbone at lr 3e-5 in PRISM); a small CNN trained from scratch at Adam 1e-3 collapses
            under weight 1, with PML's own ``CrossBatchMemory`` too (docs/notebook/prism.md, glyphs).
        margin: similarity above which a negative pair is penalised (``self.margin = 0.5`` of the loss).
        rate: where R comes from. ``given`` (PRISM's protocol): ``noise_rate``, else the spec's
            ``dataset.noise.ratio`` — an oracle no practitioner has. ``estimated``: at the end of every epoch, from
            the kNN vote on the training embeddings (:func:`~trainables.families.noise_detectors.knn_noise_rate`, k = 10),
            used for the next epoch; the first epoch selects nothing (R = 0). Excludes a fixed ``noise_rate``.
    """

    noise_rate: Annotated[float, Field(ge=0, lt=1)] | None = None
    window_size: PositiveInt = 30
    warm_up: Annotated[int, Field(ge=0)] = 0
    memory_size: PositiveInt = 9500
    memory_start: Annotated[int, Field(ge=0)] = 0
    memory_weight: NonNegative = 1.0
    margin: Annotated[float, Field(ge=-1, lt=1)] = 0.5
    rate: Literal["given", "estimated"] = "given"


class PrismRules(FamilyRules):
    name = "prism"
    Params: ClassVar[type] = PrismParams
    metric_names: ClassVar[tuple[str, ...]] = (
        names.PRISM_ESTIMATED_RATE,
        names.PRISM_THRESHOLD,
        names.PRISM_KEPT_SHARE,
        names.EXCLUDED_SHARE,
        names.NOISE_AUROC,
        names.NOISE_PRECISION,
        names.NOISE_RECALL,
    )

    @classmethod
    def check_spec(cls, params: PrismParams, extremes: dict[str, list[Any]]) -> None:
        """``rate: estimated`` takes R from the data: a fixed ``noise_rate`` beside it would be ignored."""
        if "estimated" in extremes["rate"] and any(v is not None for v in extremes["noise_rate"]):
            raise ValueError(
                f"noise_rate must be null with rate: estimated (R is estimated), but got noise_rate={params.noise_rate}"
            )

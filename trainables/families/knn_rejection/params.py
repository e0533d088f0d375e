"""``knn_rejection``'s parameters: MS (:class:`~trainables.families.ms.params.MSParams`) on the samples whose
previous-epoch neighbours agree with their label."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from trainables.families.ms.params import MSParams
from trainables.families.rules import FamilyRules, PositiveInt
from trainables.schema import metric_names as names

__all__ = ["KnnRejectionParams", "KnnRejectionRules"]


@dataclass(frozen=True)
class KnnRejectionParams(MSParams):
    """Hyperparameters of kNN rejection on MS: :class:`MSParams` plus the vote.

    N2D2's own k and threshold were not available to us when this was written (we read its abstract only), so the
    defaults are measured, and a study should search them (``search_spaces/knn_rejection_glyphs.yaml``): k = 10 as
    the detectors use, and ``agreement`` = 0.1, keep a sample when at least one of its 10 neighbours shares its label.
    A majority vote (0.5) rejects 95 % of glyphs' training set after the first epoch (20 % per-class noise; 12
    samples per class, so a young embedding seldom puts 5 same-label samples among the 10 nearest) and 92 % after
    the second; at 0.1 it rejects 42 % / 31 %, of which 38 % / 51 % are noisy, catching 95 % / 93 % of the noise
    (docs/notebook/prism.md, "Label-free detectors").

    Args:
        k: neighbours of each sample in the previous epoch's training embeddings (itself excluded).
        agreement: the least share of the ``k`` neighbours that must carry the sample's label for it to be kept.
    """

    k: PositiveInt = 10
    agreement: Annotated[float, Field(gt=0, le=1)] = 0.1


class KnnRejectionRules(FamilyRules):
    name = "knn_rejection"
    Params: ClassVar[type] = KnnRejectionParams
    metric_names: ClassVar[tuple[str, ...]] = (
        names.KNN_REJECTED_SHARE,
        names.EXCLUDED_SHARE,
        names.NOISE_AUROC,
        names.NOISE_PRECISION,
        names.NOISE_RECALL,
    )

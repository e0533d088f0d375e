"""Triplet loss with the noise paper's two semi-hard miners (families ``triplet`` and ``triplet_smooth``).

Loss: Eq. 3 of "embedding losses under label noise" (``/work/shared/papers/embedding-losses-under-label-noise.txt``),
``[d_ap − d_an + α]_+`` on L2-normalised embeddings (Euclidean d, PML ``TripletMarginLoss``, mean over the
triplets with non-zero loss). ``triplet_smooth`` is the soft-plus form ``log(1 + exp(d_ap − d_an + α))`` of
Hermans, Beyer & Leibe, "In Defense of the Triplet Loss" (https://arxiv.org/abs/1703.07737), a BSPML
baseline, with batch-hard mining and α = 0 as there.

Mining (``params.mining``), one negative per positive pair for the two semi-hard rules (Sec. 4.2):

- ``random_semihard`` (Eq. 28): a uniformly random negative with positive hinge loss, ``d_an < d_ap + α``;
  positive pairs without such a negative are dropped (their loss would be zero anyway).
- ``fixed_semihard`` (Eq. 29): the closest negative farther than the positive, ``argmin_{d_an > d_ap} d_an``;
  if every negative is closer than the positive, the farthest negative.
- ``hard``: batch-hard, the farthest positive and closest negative per anchor (PML ``BatchHardMiner``).
- ``all``: every triplet of the batch (no miner).

PML's ``TripletMarginMiner("semihard")`` keeps *all* negatives with ``d_ap < d_an < d_ap + α`` rather than
one per positive pair, so the two rules of the paper are written here.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.distances import LpDistance
from torch import nn

from trainables.families.base import PmlLossFamily
from trainables.families.triplet.params import (
    Mining,
    TripletParams,
    TripletRules,
    TripletSmoothParams,
    TripletSmoothRules,
)

__all__ = [
    "TripletFamily",
    "TripletParams",
    "TripletSmoothFamily",
    "TripletSmoothParams",
    "RandomSemiHardMiner",
    "FixedSemiHardMiner",
    "build_triplet_miner",
]

_TripletParamsT = TypeVar("_TripletParamsT", bound=TripletParams)


def _positive_pairs(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    same = labels[:, None] == labels[None, :]
    same.fill_diagonal_(False)
    anchors, positives = torch.nonzero(same, as_tuple=True)
    return anchors, positives


class _SemiHardMiner(miners.BaseMiner):
    """One negative per (anchor, positive) pair of the batch, chosen by :meth:`_pick`."""

    def __init__(self, margin: float) -> None:
        super().__init__(distance=LpDistance(normalize_embeddings=True, p=2, power=1))
        self.margin = margin

    def mine(self, embeddings, labels, ref_emb, ref_labels):  # noqa: ANN001, ANN201 (PML's signature)
        dist = self.distance(embeddings, ref_emb)
        anchors, positives = _positive_pairs(labels)
        d_ap = dist[anchors, positives][:, None]  # (pairs, 1)
        d_an = dist[anchors]  # (pairs, N)
        is_neg = labels[anchors][:, None] != ref_labels[None, :]
        negatives, keep = self._pick(d_ap, d_an, is_neg)
        return anchors[keep], positives[keep], negatives[keep]

    def _pick(self, d_ap: torch.Tensor, d_an: torch.Tensor, is_neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (negative index per pair, which pairs keep a triplet)."""
        raise NotImplementedError


class RandomSemiHardMiner(_SemiHardMiner):
    """Noise paper Eq. 28: per positive pair, a uniformly random negative with ``d_an < d_ap + α``."""

    def _pick(self, d_ap, d_an, is_neg):  # noqa: ANN001, ANN202
        candidates = is_neg & (d_an < d_ap + self.margin)
        # Uniform choice among the candidates: the argmax of i.i.d. uniform scores restricted to them.
        scores = torch.rand(d_an.shape, device=d_an.device).masked_fill(~candidates, -1.0)
        return scores.argmax(dim=1), candidates.any(dim=1)


class FixedSemiHardMiner(_SemiHardMiner):
    """Noise paper Eq. 29: per positive pair, the closest negative with ``d_an > d_ap``; else the farthest."""

    def _pick(self, d_ap, d_an, is_neg):  # noqa: ANN001, ANN202
        farther = is_neg & (d_an > d_ap)
        inf = torch.finfo(d_an.dtype).max
        closest_farther = d_an.masked_fill(~farther, inf).argmin(dim=1)
        farthest = d_an.masked_fill(~is_neg, -inf).argmax(dim=1)
        chosen = torch.where(farther.any(dim=1), closest_farther, farthest)
        return chosen, is_neg.any(dim=1)


def build_triplet_miner(mining: Mining, margin: float) -> nn.Module | None:
    """The miner of one ``params.mining`` value (``None`` = every triplet)."""
    if mining == "random_semihard":
        return RandomSemiHardMiner(margin)
    if mining == "fixed_semihard":
        return FixedSemiHardMiner(margin)
    if mining == "hard":
        return miners.BatchHardMiner()
    return None


class TripletFamily(TripletRules, PmlLossFamily[_TripletParamsT]):
    def build_criterion(self, params: TripletParams) -> nn.Module:
        return losses.TripletMarginLoss(margin=params.margin)

    def build_miner(self, params: TripletParams) -> nn.Module | None:
        return build_triplet_miner(params.mining, params.margin)


class TripletSmoothFamily(TripletSmoothRules, TripletFamily[TripletSmoothParams]):
    """The triplet family with the soft-plus loss (same miners)."""

    def build_criterion(self, params: TripletParams) -> nn.Module:
        return losses.TripletMarginLoss(margin=params.margin, smooth_loss=True)

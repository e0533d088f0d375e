"""Robust metric learning with the rescaled hinge loss (family ``rdml``).

Al-Obaidi, Zabihzadeh & Hajiabadi, "Robust metric learning based on the rescaled hinge loss", IJMLC 11, 2020
(https://arxiv.org/abs/1904.11711), a BSPML baseline. The rescaled hinge loss is Xu, Cao, Hu & Principe,
"Robust support vector machines based on the rescaled hinge loss function", Pattern Recognition 63, 2017,
Eq. 9: ``ℓ_rh(h) = β_η (1 − exp(−η h))`` with ``β_η = 1 / (1 − exp(−η))``, applied to a hinge ``h ≥ 0``. It equals
the hinge for small ``h`` (slope ``η β_η`` at 0) and saturates at ``β_η`` for large ``h``, so a pair that violates
its constraint badly (typically a mislabeled one) cannot dominate the loss; η sets how early it saturates.

Al-Obaidi et al. learn a Mahalanobis metric from pairwise constraints ``y_ij (b − d²_ij) ≥ 1`` (``y = +1`` same
label, −1 different; ``b`` a threshold), hinge ``h_ij = [1 − y_ij (b − d²_ij)]_+``, solved by half-quadratic
optimisation. Here, on a deep network (as the BSPML baselines run it), ``d²_ij`` is the squared Euclidean distance
of L2-normalised embeddings (in [0, 4]); the unit margin becomes ``margin`` because the sphere bounds ``d²``, and
the loss is minimised by SGD on ``mean_{pos} ℓ_rh(h) + mean_{neg} ℓ_rh(h)`` over every pair of the batch (the two
means keep the ~(P−1)/1 excess of negative pairs from drowning the positives). This adaptation is ours; the
original has no deep version.
"""

from __future__ import annotations

import math

import torch

from trainables.families.base import BaseLossFamily, Batch
from trainables.families.rdml.params import RDMLParams, RDMLRules

__all__ = ["RDMLFamily", "RDMLParams", "rescaled_hinge"]


def rescaled_hinge(h: torch.Tensor, eta: float) -> torch.Tensor:
    """Xu et al. 2017 Eq. 9 applied to a non-negative hinge ``h``: ``(1 − e^{−η h}) / (1 − e^{−η})``."""
    return -torch.expm1(-eta * h) / -math.expm1(-eta)


class RDMLFamily(RDMLRules, BaseLossFamily[RDMLParams]):
    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: RDMLParams = self.params
        sq = (2.0 - 2.0 * embeddings @ embeddings.T).clamp(min=0.0)  # ‖x_i − x_j‖² of unit vectors
        same = batch.labels[:, None] == batch.labels[None, :]
        off_diag = ~torch.eye(len(batch.labels), dtype=torch.bool, device=embeddings.device)
        y = same.to(embeddings.dtype) * 2 - 1
        loss = rescaled_hinge(torch.relu(p.margin - y * (p.threshold - sq)), p.eta)
        terms = {}
        for name, mask in (("rdml_pos", same & off_diag), ("rdml_neg", ~same)):
            # An empty pair set gives an attached zero (mean of nothing would be NaN).
            terms[name] = loss[mask].mean() if mask.any() else embeddings.sum() * 0
        return terms

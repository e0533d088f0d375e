"""Two-view contrastive losses: N-pair/InfoNCE, the debiased ``L_Neg`` and ``L_Pos`` and hard-negative HCL (families
``npair``, ``debiased_neg``, ``debiased_pos``, ``hcl``).

The thesis ``/work/shared/papers/unbiased-contrastive-learning-thesis-ru.txt`` (after Chuang et al., "Debiased
Contrastive Learning", NeurIPS 2020, https://arxiv.org/abs/2007.00224) in SimCLR's setting: each image of the
batch is augmented twice; for an anchor ``x`` the other view of the same image is the positive ``v`` and the
other ``N = 2B − 2`` embeddings of the batch are the "negatives" ``u_i``. Similarities are ``s = f(x)ᵀf(·) / t``
with temperature ``t``. Class labels are never used by these losses (only by the P×K sampler), so a wrong label
cannot hurt them directly; what they correct for is *false negatives* (``u_i`` of the anchor's class, prior
``τ⁺``; with P×K batches the actual share is ``(K − 1)/(P·K − 1)``) and *false positives* (views that no
longer show the same object).

- ``npair``: InfoNCE / NT-Xent (thesis Eq. 2, 12), pytorch-metric-learning's ``NTXentLoss`` with one label per
  image: ``−log e^{s(x,v)} / (e^{s(x,v)} + Σ_i e^{s(x,u_i)})``.
- ``debiased_neg``: ``L_Neg`` (thesis Eq. 15-16, M = 1 positive): the negative sum becomes ``N·g`` with
  ``g = max((1/τ⁻)(mean_i e^{s(x,u_i)} − τ⁺ e^{s(x,v)}), e^{−1/t})``, ``τ⁻ = 1 − τ⁺``.
- ``debiased_pos``: ``L_Pos`` (thesis Eq. 22-24), the thesis' contribution:
  ``−log[(P_emp − τ⁻P⁻_emp) / (P_emp + (Nτ⁺ − τ⁻)P⁻_emp)]`` with ``P_emp`` the mean of ``e^{s}`` over the
  negatives, the positive and the anchor itself (Eq. 23) and ``P⁻_emp`` the mean over the negatives (Eq. 24).
  The numerator estimates ``τ⁺·E⁺`` (Eq. 19) only asymptotically (N → ∞); in a batch it also carries the
  anchor's own ``e^{f(x)ᵀf(x)/t} = e^{1/t}/(N+2)`` (the largest term of the row), which makes the push on the
  negatives several times the pull on the positive (2-D experiment: docs/notebook/thesis_2d.md). ``self_term: false``
  drops it: ``P_emp`` over the N negatives and the positive only (N + 1 terms); at ``τ⁺ = 1/(N+1)`` this is
  exactly InfoNCE. ``E⁺ ≥ e^{−1/t}``; like Eq. 16's floor on ``g`` we keep the numerator at least
  ``τ⁺e^{−1/t}`` (our guard: a small batch can make the estimate non-positive, and ``log`` of it NaN).
- ``hcl``: hard-negative debiased contrastive learning (Robinson et al., "Contrastive Learning with Hard Negative
  Samples", ICLR 2021, https://arxiv.org/abs/2010.04592, Sec. 3: the importance-sampled hard-negative objective,
  as the official ``criterion`` of github.com/joshr17/HCL ``image/main.py`` computes it): ``L_Neg`` whose
  negatives are importance-weighted towards the hard ones, ``w_i = e^{β·s(x,u_i)} / mean_j e^{β·s(x,u_j)}``, so
  that ``mean_i e^{s(x,u_i)}`` becomes ``mean_i w_i e^{s(x,u_i)}`` and
  ``N·g = max((Σ_i w_i e^{s(x,u_i)} − Nτ⁺e^{s(x,v)})/τ⁻, N·e^{−1/t})``. As in the official code the weights are
  not detached. ``β = 0`` gives every negative weight 1: exactly ``L_Neg``.

Both debiased losses are computed in float64 on each row shifted by its maximum (the ratios are invariant to a
common factor), so the floors ``e^{−1/t}`` neither underflow nor the ``e^{1/t}`` self term overflow for
temperatures down to about 0.003.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from pytorch_metric_learning import losses

from trainables.families.base import BaseLossFamily, Batch, ParamsT
from trainables.families.debiased.params import (
    DebiasedNegRules,
    DebiasedParams,
    DebiasedPosParams,
    DebiasedPosRules,
    HCLParams,
    HCLRules,
    NPairParams,
    NPairRules,
)

__all__ = [
    "NPairFamily",
    "NPairParams",
    "DebiasedNegFamily",
    "DebiasedPosFamily",
    "DebiasedParams",
    "DebiasedPosParams",
    "debiased_neg_loss",
    "debiased_pos_loss",
    "HCLFamily",
    "HCLParams",
    "hcl_loss",
]

_DebiasedParamsT = TypeVar("_DebiasedParamsT", bound=DebiasedParams)


def _view_ids(num_embeddings: int, device: torch.device) -> torch.Tensor:
    """Image id of each embedding; the loop stacks the two views view-major: ``[x_1..x_B, x'_1..x'_B]``."""
    return torch.arange(num_embeddings // 2, device=device).repeat(2)


def _shifted_exp_terms(
    embeddings: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Per anchor (row): ``e^{s(x,v) − m}``, the negatives' ``e^{s(x,u_i) − m}`` summed, ``e^{s(x,x) − m}``,
    the shift ``m`` (the row maximum) and ``N``; in float64."""
    z = embeddings.double()
    n2 = len(z)
    s = z @ z.T / temperature
    m = s.max(dim=1, keepdim=True).values.detach()
    e = torch.exp(s - m)
    rows = torch.arange(n2, device=z.device)
    partner = (rows + n2 // 2) % n2
    pos = e[rows, partner]
    self_term = e[rows, rows]
    neg_sum = e.sum(dim=1) - pos - self_term
    return pos, neg_sum, self_term, m.squeeze(1), n2 - 2


def debiased_neg_loss(embeddings: torch.Tensor, temperature: float, tau_plus: float) -> torch.Tensor:
    """Mean ``L_Neg`` (thesis Eq. 15-16) over every anchor of a two-view batch (views stacked view-major)."""
    pos, neg_sum, _, m, n = _shifted_exp_terms(embeddings, temperature)
    tau_minus = 1.0 - tau_plus
    n_g = (neg_sum - n * tau_plus * pos) / tau_minus
    n_g = torch.maximum(n_g, n * torch.exp(-1.0 / temperature - m))  # Eq. 16's floor, times N, shifted
    return (torch.log(pos + n_g) - torch.log(pos)).mean().to(embeddings.dtype)


def debiased_pos_loss(
    embeddings: torch.Tensor, temperature: float, tau_plus: float, self_term: bool = True
) -> torch.Tensor:
    """Mean ``L_Pos`` (thesis Eq. 22-24) over every anchor of a two-view batch (views stacked view-major).

    ``self_term=False``: Eq. 23 without the anchor's ``e^{f(x)ᵀf(x)/t}``, normalised over N + 1.
    """
    pos, neg_sum, own, m, n = _shifted_exp_terms(embeddings, temperature)
    tau_minus = 1.0 - tau_plus
    if self_term:
        p_emp = (neg_sum + pos + own) / (n + 2)  # Eq. 23
    else:
        p_emp = (neg_sum + pos) / (n + 1)  # Eq. 23 without the anchor itself
    p_neg = neg_sum / n  # Eq. 24
    numerator = torch.maximum(p_emp - tau_minus * p_neg, tau_plus * torch.exp(-1.0 / temperature - m))
    denominator = numerator + n * tau_plus * p_neg  # = P_emp + (Nτ⁺ − τ⁻)·P⁻_emp while the floor is inactive
    return (torch.log(denominator) - torch.log(numerator)).mean().to(embeddings.dtype)


def hcl_loss(embeddings: torch.Tensor, temperature: float, tau_plus: float, beta: float) -> torch.Tensor:
    """Mean HCL loss (Robinson et al. 2021, Sec. 3, the ``hard`` estimator of their code) over every anchor of a
    two-view batch (views stacked view-major); ``beta = 0`` is :func:`debiased_neg_loss`."""
    z = embeddings.double()
    n2 = len(z)
    s = z @ z.T / temperature
    m = s.max(dim=1, keepdim=True).values.detach()
    rows = torch.arange(n2, device=z.device)
    partner = (rows + n2 // 2) % n2
    negative = torch.ones(n2, n2, dtype=torch.bool, device=z.device)
    negative[rows, rows] = False
    negative[rows, partner] = False
    s_neg = s[negative].view(n2, n2 - 2)
    n = n2 - 2
    pos = torch.exp(s[rows, partner] - m.squeeze(1))
    # w_i ∝ e^{β s_i}, shifted by the row's largest negative logit (the weights are a ratio: the shift cancels).
    log_w = beta * (s_neg - s_neg.max(dim=1, keepdim=True).values.detach())
    w = torch.exp(log_w)
    reweighted = n * (w * torch.exp(s_neg - m)).sum(dim=1) / w.sum(dim=1)  # Σ_i w_i e^{s_i − m}, mean(w) = 1
    n_g = (reweighted - n * tau_plus * pos) / (1.0 - tau_plus)
    n_g = torch.maximum(n_g, n * torch.exp(-1.0 / temperature - m.squeeze(1)))
    return (torch.log(pos + n_g) - torch.log(pos)).mean().to(embeddings.dtype)


class _TwoViewFamily(BaseLossFamily[ParamsT]):
    num_views = 2


class NPairFamily(NPairRules, _TwoViewFamily[NPairParams]):
    def __init__(self, params: NPairParams, ctx: Any) -> None:
        super().__init__(params, ctx)
        self.criterion = losses.NTXentLoss(temperature=params.temperature)

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        return {self.name: self.criterion(embeddings, _view_ids(len(embeddings), embeddings.device))}


class _DebiasedFamily(_TwoViewFamily[_DebiasedParamsT]):
    #: ``(embeddings, temperature, tau_plus) -> loss``
    loss_fn: ClassVar[staticmethod[[torch.Tensor, float, float], torch.Tensor]]

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: DebiasedParams = self.params
        return {self.name: type(self).loss_fn(embeddings, p.temperature, p.tau_plus)}


class DebiasedNegFamily(DebiasedNegRules, _DebiasedFamily[DebiasedParams]):
    loss_fn = staticmethod(debiased_neg_loss)


class DebiasedPosFamily(DebiasedPosRules, _DebiasedFamily[DebiasedPosParams]):
    loss_fn = staticmethod(debiased_pos_loss)

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: DebiasedPosParams = self.params
        return {self.name: debiased_pos_loss(embeddings, p.temperature, p.tau_plus, p.self_term)}


class HCLFamily(HCLRules, _TwoViewFamily[HCLParams]):
    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: HCLParams = self.params
        return {self.name: hcl_loss(embeddings, p.temperature, p.tau_plus, p.beta)}

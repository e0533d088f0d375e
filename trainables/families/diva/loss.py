"""DiVA: diverse visual feature aggregation (family ``diva``).

Milbich et al., "DiVA: Diverse Visual Feature Aggregation for Deep Metric Learning", ECCV 2020
(``/work/shared/papers/diva-diverse-feature-aggregation-eccv2020.md``). One backbone, four task heads, Eq. 7:

    L = L_disc + α·L_shared + α·L_intra + α·L_DaNCE − ρ·Σ_{(a,b)∈P} c(φ_a, φ_b)

- Heads: the model's embedding is split into four consecutive chunks (disc, shared, intra, dance), each
  L2-normalised: four linear heads on the shared features, as the paper's Fig. 3. The test embedding is their
  concatenation, re-normalised (Sec. 3.2, last paragraph).
- ``L_disc``: Wu et al.'s margin loss (learnable β per class, margin γ, distance-weighted sampling) on the labels,
  pytorch-metric-learning's ``MarginLoss`` + ``DistanceWeightedMiner`` as in the ``margin`` family.
- ``L_shared`` (Eq. 3): margin loss on triplets whose three members come from mutually different classes;
  ``L_intra`` (Eq. 4): on triplets from one class. Both draw p and n by distance-weighted sampling (Wu et al.:
  probability ∝ ``q(d)^{-1}``, distances clipped below at ``cutoff``, none beyond ``nonzero_loss_cutoff``).
- ``L_DaNCE`` (Eq. 6): NCE between the dance head of an image and of its augmentation (the loop's second view)
  embedded by a momentum copy of the network (``φ* ← μφ* + (1 − μ)φ``, Sec. 3.2), against a memory queue of
  earlier keys; each negative's logit is scaled by ``w(d) = min(λ, q(d)^{-1})``. Our reading, where the paper is
  silent: the weights of one anchor's negatives are rescaled to mean 1 before the cap λ (unscaled, ``q(d)^{-1}``
  spans tens of orders of magnitude at D ≥ 32), negatives beyond ``nonzero_loss_cutoff`` get weight 0 (logit 0),
  and the key encoder runs in eval mode with the online network's BatchNorm statistics (no shuffled BN).
- Decorrelation (Eq. 7): pairs P = {(disc, dance), (disc, shared), (disc, intra)}; ``c(φ_a, φ_b)`` is the
  squared point-wise product ``R(φ_a) ⊙ ψ̂(R(φ_b))`` averaged over dimensions and the batch, ψ a two-layer MLP
  per pair whose output is L2-normalised (ψ maximises c: unnormalised it would grow without bound), R a gradient
  reversal, so ψ learns to correlate the heads while the heads learn to decorrelate. The average over
  dimensions is the scale at which Tab. 1's ρ values (50-1500) are of the order of the other terms.
- Divisor of the margin losses (``margin_divisor``): the official code (``criteria/margin.py``,
  ``criteria/shared_margin.py`` of github.com/Confusezius/ECCV2020_DiVA_MultiFeature_DML) divides the summed
  ``relu(d_ap − β + γ) + relu(β − d_an + γ)`` by ``sum((pos > 0) + (neg > 0))``; on the bool tensors of PyTorch ≥ 1.2
  (its stated requirement) ``+`` is a logical OR, so it counts triplets with any active term (``per_triplet``,
  our default: what produced the paper's numbers). pytorch-metric-learning's ``MarginLoss`` counts positive and
  negative violations separately (``per_term``), up to half as large. The switch applies to all three margin
  losses (disc, shared, intra), as the official code uses one criterion for them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses, miners
from torch import nn

from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.diva.params import HEADS, DiVAParams, DiVARules

__all__ = [
    "DiVAFamily",
    "DiVAParams",
    "HEADS",
    "dance_loss",
    "distance_weighted_sample",
    "log_inverse_sphere_density",
    "shared_triplets",
    "intra_triplets",
    "DiVAMarginLoss",
]

_DECORRELATED = ("dance", "shared", "intra")  # each paired with "disc"


class DiVAMarginLoss(losses.MarginLoss):
    """pytorch-metric-learning's ``MarginLoss`` (which divides by the number of violated terms, ``per_term``)
    with the option to divide by the number of triplets with any violated term (``per_triplet``, the official
    DiVA code: ``pos_loss + neg_loss > 0`` exactly where ``(pos_loss > 0) | (neg_loss > 0)``, both being ≥ 0)."""

    def __init__(self, *args: Any, divisor: Literal["per_triplet", "per_term"] = "per_triplet", **kwargs: Any) -> None:
        if divisor not in ("per_triplet", "per_term"):
            raise ValueError(f"divisor must be 'per_triplet' or 'per_term', but got {divisor=}")
        super().__init__(*args, **kwargs)
        self.divisor = divisor

    def compute_loss(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        loss_dict = super().compute_loss(*args, **kwargs)
        term = loss_dict["margin_loss"]
        if self.divisor == "per_triplet" and "divisor" in term:  # zero_losses() has no divisor: nothing mined
            term["divisor"] = torch.sum(term["losses"] > 0.0)
        return loss_dict


def log_inverse_sphere_density(distances: torch.Tensor, dim: int, cutoff: float) -> torch.Tensor:
    """``−log q(d)``, ``q(d) = d^{D−2}(1 − d²/4)^{(D−3)/2}`` (Wu et al. Eq. 1), with d clipped below at ``cutoff``."""
    d = distances.clamp(min=cutoff, max=2.0 - 1e-6)
    return (2.0 - dim) * torch.log(d) - (dim - 3.0) / 2.0 * torch.log1p(-0.25 * d * d)


def distance_weighted_sample(
    distances: torch.Tensor, candidates: torch.Tensor, dim: int, cutoff: float, nonzero_loss_cutoff: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, one column among ``candidates`` drawn with probability ∝ ``q(d)^{-1}`` (only ``d <
    nonzero_loss_cutoff``; uniformly among the candidates when none is that close). Returns ``(index, valid)``;
    ``valid`` is False for rows without candidates."""
    log_w = log_inverse_sphere_density(distances, dim, cutoff)
    near = candidates & (distances < nonzero_loss_cutoff)
    log_w = torch.where(near, log_w, torch.full_like(log_w, -math.inf))
    far_only = candidates.any(1) & ~near.any(1)
    log_w[far_only] = torch.where(candidates[far_only], 0.0, -math.inf).to(log_w.dtype)
    valid = candidates.any(1)
    index = torch.zeros(len(distances), dtype=torch.long, device=distances.device)
    if valid.any():
        probs = torch.softmax(log_w[valid], dim=1)
        index[valid] = torch.multinomial(probs, 1).squeeze(1)
    return index, valid


def _triplets(
    embeddings: torch.Tensor, first: torch.Tensor, second: Callable[[torch.Tensor], torch.Tensor], p: DiVAParams
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, p, n): p drawn among the candidates ``first[a]``, n among ``second(positives)[a]``."""
    with torch.no_grad():
        dist = torch.cdist(embeddings, embeddings)
        dim = embeddings.shape[1]
        pos, pos_ok = distance_weighted_sample(dist, first, dim, p.cutoff, p.nonzero_loss_cutoff)
        neg, neg_ok = distance_weighted_sample(dist, second(pos), dim, p.cutoff, p.nonzero_loss_cutoff)
    anchors = torch.nonzero(pos_ok & neg_ok).squeeze(1)
    return anchors, pos[anchors], neg[anchors]


def shared_triplets(embeddings: torch.Tensor, labels: torch.Tensor, p: DiVAParams) -> tuple[torch.Tensor, ...]:
    """Triplets with ``y_a ≠ y_p ≠ y_n ≠ y_a`` (DiVA Eq. 3), distance-weighted."""
    other = labels[:, None] != labels[None, :]
    return _triplets(embeddings, other, lambda pos: other & (labels[None, :] != labels[pos][:, None]), p)


def intra_triplets(embeddings: torch.Tensor, labels: torch.Tensor, p: DiVAParams) -> tuple[torch.Tensor, ...]:
    """Triplets of three different samples of one class (DiVA Eq. 4), distance-weighted."""
    n = len(labels)
    columns = torch.arange(n, device=labels.device)
    same = (labels[:, None] == labels[None, :]) & ~torch.eye(n, dtype=torch.bool, device=labels.device)
    return _triplets(embeddings, same, lambda pos: same & (columns[None, :] != pos[:, None]), p)


def dance_loss(queries: torch.Tensor, keys: torch.Tensor, queue: torch.Tensor, p: DiVAParams) -> torch.Tensor:
    """DiVA Eq. 6 for unit-norm ``queries`` (B, D), their positive ``keys`` (B, D) and the negatives ``queue`` (M, D)."""
    sim = queries @ queue.T
    with torch.no_grad():
        distances = (2.0 - 2.0 * sim).clamp(min=0.0).sqrt()
        log_w = log_inverse_sphere_density(distances, queries.shape[1], p.cutoff)
        near = distances < p.nonzero_loss_cutoff
        log_w = torch.where(near, log_w, torch.full_like(log_w, -math.inf))
        count = near.sum(1, keepdim=True).clamp(min=1)
        # Mean-1 rescaling in log space (the raw weights overflow), then the cap λ.
        weights = torch.exp(log_w - torch.logsumexp(log_w, dim=1, keepdim=True) + torch.log(count.to(log_w.dtype)))
        weights = torch.nan_to_num(weights, nan=0.0).clamp(max=p.weight_cap)
    positive = (queries * keys).sum(1, keepdim=True)
    logits = torch.cat([positive, weights * sim], dim=1) / p.temperature
    return F.cross_entropy(logits, torch.zeros(len(queries), dtype=torch.long, device=queries.device))


class _ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -grad


def reverse_gradient(x: torch.Tensor) -> torch.Tensor:
    """R of Eq. 7: the identity forwards, the negated gradient backwards."""
    return _ReverseGradient.apply(x)


def decorrelation(phi_a: torch.Tensor, phi_b: torch.Tensor, psi: nn.Module) -> torch.Tensor:
    """``c(φ_a, φ_b)``: mean over batch and dimensions of ``(R(φ_a) ⊙ ψ̂(R(φ_b)))²``, ψ̂ = normalised ψ."""
    mapped = F.normalize(psi(reverse_gradient(phi_b)), dim=1)
    return (reverse_gradient(phi_a) * mapped).pow(2).mean()


def head_slices(embedding_dim: int) -> list[slice]:
    """Consecutive chunks of the embedding, one per head (sizes differ by at most one)."""
    bounds = [round(i * embedding_dim / len(HEADS)) for i in range(len(HEADS) + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


class DiVAFamily(DiVARules, BaseLossFamily[DiVAParams]):
    num_views = 2  # the image and its augmentation, for DaNCE

    # DaNCE's memory queue: buffers (checkpointed with the family), typed for the checker.
    queue: torch.Tensor
    queue_filled: torch.Tensor
    queue_next: torch.Tensor

    def __init__(self, params: DiVAParams, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        self.slices = head_slices(ctx.embedding_dim)
        sizes = dict(zip(HEADS, (s.stop - s.start for s in self.slices)))
        num_classes = int(ctx.train_labels.max()) + 1 if len(ctx.train_labels) else 1
        self.disc = DiVAMarginLoss(
            margin=params.margin,
            nu=0.0,
            beta=params.beta_init,
            learn_beta=True,
            num_classes=num_classes,
            divisor=params.margin_divisor,
        )
        self.disc_miner = miners.DistanceWeightedMiner(
            cutoff=params.cutoff, nonzero_loss_cutoff=params.nonzero_loss_cutoff
        )
        self.fixed_margin = DiVAMarginLoss(
            margin=params.margin, nu=0.0, beta=params.beta_init, learn_beta=False, divisor=params.margin_divisor
        )
        self.psi = nn.ModuleDict(
            {
                head: nn.Sequential(
                    nn.Linear(sizes[head], params.decorrelation_hidden),
                    nn.ReLU(),
                    nn.Linear(params.decorrelation_hidden, sizes["disc"]),
                )
                for head in _DECORRELATED
            }
        )
        self.register_buffer("queue", torch.zeros(params.queue_size, sizes["dance"]))
        self.register_buffer("queue_filled", torch.tensor(0, dtype=torch.long))
        self.register_buffer("queue_next", torch.tensor(0, dtype=torch.long))
        self._online: list[nn.Module] = []  # a list, so the online network is not a submodule of the family

    def bind_model(self, model: nn.Module) -> None:
        self._online = [model]
        self.key_encoder = copy.deepcopy(model).requires_grad_(False)  # a submodule: checkpointed with the family

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        return [
            {"params": list(self.disc.parameters()), "lr": self.params.beta_lr},
            {"params": list(self.psi.parameters())},
        ]

    def heads(self, embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
        return {h: F.normalize(embeddings[:, s], dim=1) for h, s in zip(HEADS, self.slices)}

    def test_embedding(self, embeddings: torch.Tensor) -> torch.Tensor:
        return F.normalize(torch.cat(list(self.heads(embeddings).values()), dim=1), dim=1)

    @torch.no_grad()
    def _update_key_encoder(self) -> None:
        mu = self.params.ema_momentum
        online = self._online[0]
        for key, value in zip(self.key_encoder.parameters(), online.parameters()):
            key.mul_(mu).add_(value.detach(), alpha=1.0 - mu)
        for key_buffer, buffer in zip(self.key_encoder.buffers(), online.buffers()):
            key_buffer.copy_(buffer)

    @torch.no_grad()
    def _keys(self, inputs: torch.Tensor) -> torch.Tensor:
        self._update_key_encoder()
        self.key_encoder.eval()
        return self.heads(self.key_encoder(inputs).float())["dance"]

    @torch.no_grad()
    def _enqueue(self, keys: torch.Tensor) -> None:
        size = len(self.queue)
        keys = keys[-size:]
        rows = (self.queue_next + torch.arange(len(keys), device=keys.device)) % size
        self.queue[rows] = keys
        self.queue_next.copy_((self.queue_next + len(keys)) % size)
        self.queue_filled.copy_(torch.clamp(self.queue_filled + len(keys), max=size))

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        p: DiVAParams = self.params
        n = len(batch.labels)
        phi = self.heads(embeddings[:n])  # the first view; the second is DaNCE's augmentation
        labels = batch.labels
        terms = {"diva_disc": self.disc(phi["disc"], labels, self.disc_miner(phi["disc"], labels))}
        for head, sample in (("shared", shared_triplets), ("intra", intra_triplets)):
            triplets = sample(phi[head], labels, p)
            loss = self.fixed_margin(phi[head], labels, triplets) if len(triplets[0]) else phi[head].sum() * 0
            terms[f"diva_{head}"] = p.alpha * loss
        keys = self._keys(batch.inputs[n:])
        filled = int(self.queue_filled)
        if filled:  # a copy: the queue is updated in place below, before backward
            terms["diva_dance"] = p.alpha * dance_loss(phi["dance"], keys, self.queue[:filled].clone(), p)
        else:  # the first batch of a trial: no negatives yet
            terms["diva_dance"] = phi["dance"].sum() * 0
        self._enqueue(keys)
        terms["diva_decorrelation"] = -p.rho * sum(
            decorrelation(phi["disc"], phi[h], self.psi[h]) for h in _DECORRELATED
        )
        return terms

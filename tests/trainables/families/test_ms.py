"""The ``ms`` family against a loop-based reference of BSPML Eq. 3-5 and against PML."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses, miners

from trainables.families.base import Batch, FamilyContext
from trainables.families.ms.loss import MSParams, MultiSimilarityFamily


def _reference_ms(x: np.ndarray, labels: np.ndarray, alpha: float, beta: float, base: float, eps: float) -> float:
    """Mean over anchors of ξ⁺ + ξ⁻ over the informative pairs of Eq. 4-5, with plain loops."""
    n = len(x)
    sim = x @ x.T
    total = 0.0
    for a in range(n):
        pos = [sim[a, p] for p in range(n) if p != a and labels[p] == labels[a]]
        neg = [sim[a, q] for q in range(n) if labels[q] != labels[a]]
        if not pos or not neg:
            continue
        hard_neg = [s for s in neg if s > min(pos) - eps]  # Eq. 4
        hard_pos = [s for s in pos if s < max(neg) + eps]  # Eq. 5
        if hard_pos:
            total += math.log1p(sum(math.exp(-alpha * (s - base)) for s in hard_pos)) / alpha
        if hard_neg:
            total += math.log1p(sum(math.exp(beta * (s - base)) for s in hard_neg)) / beta
    return total / n


def _family(params: MSParams, n: int = 16) -> MultiSimilarityFamily:
    ctx = FamilyContext(
        num_train=n,
        num_classes=4,
        train_labels=torch.zeros(n, dtype=torch.long),
        embedding_dim=8,
        device=torch.device("cpu"),
        seed=0,
    )
    return MultiSimilarityFamily(params, ctx)


def _batch(dtype: torch.dtype, seed: int = 0, n: int = 16, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    emb = F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=1).requires_grad_(True)
    labels = torch.arange(n) % 4
    return emb, Batch(inputs=emb.detach(), labels=labels, indices=torch.arange(n))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("params", [MSParams(), MSParams(ms_alpha=1.0, ms_beta=10.0, ms_base=0.5, ms_epsilon=0.3)])
def test_ms_loss_matches_loop_reference_and_pml(dtype, params):
    emb, batch = _batch(dtype)
    terms = _family(params).compute_loss(emb, batch)
    assert set(terms) == {"ms"}
    loss = terms["ms"]
    value = float(loss.detach())
    ref = _reference_ms(
        emb.detach().double().numpy(),
        batch.labels.numpy(),
        params.ms_alpha,
        params.ms_beta,
        params.ms_base,
        params.ms_epsilon,
    )
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    assert value == pytest.approx(ref, rel=tol, abs=tol)
    pml = losses.MultiSimilarityLoss(params.ms_alpha, params.ms_beta, params.ms_base)(
        emb, batch.labels, miners.MultiSimilarityMiner(params.ms_epsilon)(emb, batch.labels)
    )
    assert value == pytest.approx(float(pml.detach()), rel=tol, abs=tol)
    loss.backward()
    assert emb.grad is not None and torch.isfinite(emb.grad).all()


def test_empty_mining_gives_an_attached_zero():
    # Two far-apart classes, each collapsed to a point: no negative is informative, no positive either.
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]], requires_grad=True)
    batch = Batch(inputs=emb.detach(), labels=torch.tensor([0, 0, 1, 1]), indices=torch.arange(4))
    loss = _family(MSParams(ms_epsilon=0.1), n=4).compute_loss(emb, batch)["ms"]
    assert float(loss.detach()) == 0.0
    loss.backward()  # still part of the graph
    assert emb.grad is not None

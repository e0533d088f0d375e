"""The pytorch-metric-learning semantics this project relies on, pinned, so the move to PML 3.x (which stops
``DotProductSimilarity`` normalising by default, raises ``TripletMarginLoss``'s default margin from 0.05 to 0.2 and
makes ``MPerClassSampler`` yield whole batches) is a deliberate change these tests guard (pyproject: ``<3``).

Each check builds what the families build (``build_criterion``/``build_miner`` through the registry, with their
default parameters) and compares against a reference computed here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import distances, losses
from pytorch_metric_learning.samplers import MPerClassSampler

from trainables.data.sampler import BalancedMPerClassSampler
from trainables.families.base import FamilyContext
from trainables.families.registry import get_family, get_rules

# Families whose loss is a PML loss on PML distances (build_criterion), each with its default parameters.
PML_FAMILIES = ("ms", "contrastive", "triplet", "triplet_smooth", "snr", "npair")


def _criterion(family: str) -> torch.nn.Module:
    """The PML loss the family trains with (its ``criterion``), built as the loop builds it."""
    ctx = FamilyContext(
        num_train=16,
        num_classes=4,
        train_labels=torch.arange(16) % 4,
        embedding_dim=8,
        device=torch.device("cpu"),
        seed=0,
    )
    return get_family(family)(get_rules(family).Params(), ctx).criterion


def _embeddings(n: int = 16, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.arange(n) % 4


def test_pml_2_distance_defaults():
    assert distances.DotProductSimilarity().normalize_embeddings is True  # 3.0: False
    assert distances.CosineSimilarity().normalize_embeddings is True
    assert distances.LpDistance().normalize_embeddings is True


@pytest.mark.parametrize("family", PML_FAMILIES)
def test_family_losses_see_normalised_embeddings(family):
    """Every PML loss a family builds compares L2-normalised embeddings: scaling the batch changes nothing."""
    criterion = _criterion(family)
    assert criterion.distance.normalize_embeddings is True
    x, labels = _embeddings()
    assert float(criterion(3.0 * x, labels)) == pytest.approx(float(criterion(x, labels)), rel=1e-9, abs=1e-12)


def test_ms_similarity_is_the_cosine():
    """MS compares cosine similarities: PML's loss on raw embeddings equals it on explicitly normalised ones with
    a plain (non-normalising) dot product."""
    criterion = _criterion("ms")
    x, labels = _embeddings()
    explicit = losses.MultiSimilarityLoss(
        alpha=criterion.alpha,
        beta=criterion.beta,
        base=criterion.base,
        distance=distances.DotProductSimilarity(normalize_embeddings=False),
    )
    assert float(criterion(x, labels)) == pytest.approx(float(explicit(F.normalize(x, dim=1), labels)), rel=1e-12)


def test_triplet_margin_is_ours_not_pmls_default():
    assert losses.TripletMarginLoss().margin == 0.05  # PML 2.x default (3.0: 0.2); the families always pass theirs
    criterion = _criterion("triplet")
    margin = get_rules("triplet").Params().margin
    assert criterion.margin == margin == 0.2
    # Brute force: every (anchor, positive, negative) on normalised embeddings, Euclidean distance, the mean over the
    # triplets with a positive loss (PML's AvgNonZeroReducer).
    x, labels = _embeddings()
    e = F.normalize(x, dim=1).numpy()
    lab = labels.numpy()
    hinge = []
    for a, p, n in itertools.permutations(range(len(e)), 3):
        if lab[a] == lab[p] and lab[a] != lab[n]:
            hinge.append(max(0.0, np.linalg.norm(e[a] - e[p]) - np.linalg.norm(e[a] - e[n]) + margin))
    positive = [h for h in hinge if h > 0]
    assert float(criterion(x, labels)) == pytest.approx(sum(positive) / len(positive), rel=1e-9)


@pytest.mark.parametrize("cls", [MPerClassSampler, BalancedMPerClassSampler])
def test_m_per_class_sampler_yields_flat_indices_in_pk_blocks(cls):
    """The train loader passes the sampler as ``sampler=`` with ``batch_size=P·K``: it must yield single indices
    (3.0 yields batches), ``length_before_new_iter`` of them, each block of P·K being P classes × K samples."""
    labels = np.repeat(np.arange(10), 6)
    rng_state = np.random.get_state()
    np.random.seed(0)
    try:
        sampler = cls(labels, m=4, batch_size=12, length_before_new_iter=48)
        indices = list(iter(sampler))
    finally:
        np.random.set_state(rng_state)
    assert len(sampler) == len(indices) == 48
    assert all(isinstance(i, (int, np.integer)) for i in indices)
    for start in range(0, 48, 12):
        classes, counts = np.unique(labels[indices[start : start + 12]], return_counts=True)
        assert len(classes) == 3 and set(counts) == {4}

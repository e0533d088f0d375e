"""knn_rejection: MS on the kept samples against a loop over pairs, the vote on hand-built neighbourhoods, a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from study.intake.spec_reader import load_spec, parse_spec
from trainables.families.base import Batch, FamilyContext
from trainables.families.knn_rejection.loss import KnnRejectionFamily, KnnRejectionParams, agreement_score
from trainables.loop import TrialRun

ALPHA, BETA, BASE, EPS = 2.0, 10.0, 0.5, 0.1


def _family(labels: torch.Tensor, **params) -> KnnRejectionFamily:
    ctx = FamilyContext(
        num_train=len(labels), num_classes=int(labels.unique().numel()), train_labels=labels, embedding_dim=4,
        device=torch.device("cpu"), seed=0,
    )  # fmt: skip
    prm = KnnRejectionParams(ms_alpha=ALPHA, ms_beta=BETA, ms_base=BASE, ms_epsilon=EPS, **params)
    return KnnRejectionFamily(prm, ctx)


def _ms_reference(x: np.ndarray, y: np.ndarray, keep: np.ndarray) -> float:
    """MS with MS mining (Eq. 3-5), pairs mined on the whole batch, pairs touching a rejected sample dropped, the
    sum over anchors divided by the batch size."""
    s = x @ x.T
    total = 0.0
    for i in range(len(y)):
        pos = [j for j in range(len(y)) if j != i and y[j] == y[i]]
        neg = [j for j in range(len(y)) if y[j] != y[i]]
        if not pos or not neg:
            continue
        hard_neg = max(s[i, j] for j in neg)
        hard_pos = min(s[i, j] for j in pos)
        mined_pos = [j for j in pos if s[i, j] - EPS < hard_neg and keep[i] and keep[j]]
        mined_neg = [j for j in neg if s[i, j] + EPS > hard_pos and keep[i] and keep[j]]
        total += math.log1p(sum(math.exp(-ALPHA * (s[i, j] - BASE)) for j in mined_pos)) / ALPHA
        total += math.log1p(sum(math.exp(BETA * (s[i, j] - BASE)) for j in mined_neg)) / BETA
    return total / len(y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_is_ms_over_the_pairs_of_kept_samples(dtype):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 4)
    x = rng.normal(size=(16, 4)) + 1.5 * np.eye(4)[y]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    fam = _family(torch.tensor(y))
    keep = np.ones(16, dtype=bool)
    keep[[1, 6, 11]] = False
    fam.keep.copy_(torch.tensor(keep))
    emb = torch.tensor(x, dtype=dtype, requires_grad=True)
    batch = Batch(emb, torch.tensor(y), torch.arange(16))
    loss = fam.compute_loss(emb, batch)["knn_rejection"].detach()
    assert float(loss) == pytest.approx(_ms_reference(x, y, keep), rel=1e-5)
    everyone = _family(torch.tensor(y)).compute_loss(emb, batch)["knn_rejection"].detach()
    assert float(everyone) == pytest.approx(_ms_reference(x, y, np.ones(16, dtype=bool)), rel=1e-5)
    assert float(everyone) != pytest.approx(float(loss))


def test_the_vote_rejects_a_sample_whose_neighbours_carry_another_label():
    # Two clusters of 6 on orthogonal axes; sample 2 sits in cluster 0 with label 1.
    rng = np.random.default_rng(1)
    x = np.concatenate([np.eye(4)[0] + 0.05 * rng.normal(size=(6, 4)), np.eye(4)[1] + 0.05 * rng.normal(size=(6, 4))])
    labels = torch.tensor([0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    fam = _family(labels, k=4, agreement=0.5)
    emb = F.normalize(torch.tensor(x, dtype=torch.float32), dim=1)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    metrics = fam.on_epoch_end(1, lambda: (emb[perm], perm))  # any order: the family puts it back in index order
    assert fam.keep.tolist() == [i != 2 for i in range(12)]
    assert metrics["knn_rejected_share"] == pytest.approx(1 / 12) == metrics["excluded_share"]
    scores = fam.sample_scores()
    assert float(scores[2]) < 0.5 and bool((scores[torch.arange(12) != 2] >= 0.5).all())
    # Sample 2's 4 neighbours are the cluster-0 samples: none agrees.
    assert float(scores[2]) == 0.0


def test_agreement_is_exact_at_the_threshold_and_scores_are_monotone():
    agree = torch.tensor([0.0, 0.3, 0.6, 0.7, 1.0], dtype=torch.float64)
    score = agreement_score(agree, 0.7)
    assert score.tolist() == pytest.approx([0.0, 0.5 * 0.3 / 0.7, 0.5 * 0.6 / 0.7, 0.5, 1.0], abs=2e-6)
    assert bool((score.diff() > 0).all()) and float(score[2]) < 0.5 <= float(score[3])
    assert agreement_score(agree, 1.0).tolist() == pytest.approx([0.0, 0.15, 0.3, 0.35, 1.0], abs=2e-6)


def test_a_short_glyphs_run_rejects_mostly_noisy_samples():
    spec = parse_spec(
        {
            "name": "knn_smoke",
            "family": "knn_rejection",
            "validation": {"kind": "none"},
            "dataset": {"name": "glyphs", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
            "train": {"epochs": 2, "classes_per_batch": 8, "samples_per_class": 4, "batches_per_epoch": 40},
            "diagnostics": {"every": 0},
        }
    )
    trial = TrialRun.build(spec)
    metrics = trial.run_epoch()
    assert 0.0 < metrics["knn_rejected_share"] < 0.6
    assert metrics["noise_auroc"] > 0.7
    rejected = ~trial.member.family.keep.numpy()
    noisy = trial.member.data.train.noisy_mask
    assert noisy[rejected].mean() > 1.5 * noisy.mean()  # the rejected are far noisier than the training set
    assert rejected[noisy].mean() > 0.8  # and most of the noise is rejected
    second = trial.run_epoch()
    assert math.isfinite(second["train/loss"])


def test_the_shipped_search_space_loads():
    spec = load_spec("search_spaces/knn_rejection_glyphs.yaml")
    assert spec.family == "knn_rejection" and set(spec.search.space) == {"k", "agreement"}

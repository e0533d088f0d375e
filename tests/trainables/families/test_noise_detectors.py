"""The label-free noise detectors against brute-force numpy references, and the loop's scoring of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from study.intake.spec_reader import parse_spec
from trainables.families.noise_detectors import (
    centroid_score,
    detection_scores,
    knn_noise_rate,
    knn_score,
    xi_score,
)
from trainables.loop import TrialRun


def _data(n: int = 40, d: int = 6, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.integers(0, classes, size=n) * 7 + 3  # non-contiguous label values


def _xi_reference(x: np.ndarray, y: np.ndarray, alpha: float, beta: float, base: float) -> np.ndarray:
    out = np.empty(len(y))
    for i in range(len(y)):
        pos = [x[i] @ x[j] for j in range(len(y)) if j != i and y[j] == y[i]]
        neg = [x[i] @ x[j] for j in range(len(y)) if y[j] != y[i]]
        xi_pos = np.log1p(sum(np.exp(-alpha * (s - base)) for s in pos)) / alpha
        xi_neg = np.log1p(sum(np.exp(beta * (s - base)) for s in neg)) / beta
        out[i] = xi_pos + xi_neg
    return out


def _centroid_reference(x: np.ndarray, y: np.ndarray, temperature: float) -> np.ndarray:
    classes = sorted(set(y.tolist()))
    centres = []
    for c in classes:
        m = x[y == c].mean(axis=0)
        centres.append(m / np.linalg.norm(m))
    out = np.empty(len(y))
    for i in range(len(y)):
        logits = np.array([x[i] @ c for c in centres]) / temperature
        p = np.exp(logits) / np.exp(logits).sum()
        out[i] = 1.0 - p[classes.index(y[i])]
    return out


def _knn_reference(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    out = np.empty(len(y))
    for i in range(len(y)):
        sims = [(x[i] @ x[j], j) for j in range(len(y)) if j != i]
        nearest = [j for _, j in sorted(sims, reverse=True)[:k]]
        out[i] = np.mean([y[j] != y[i] for j in nearest])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_xi_matches_a_loop_over_pairs(dtype):
    x, y = _data()
    ours = xi_score(torch.tensor(x, dtype=dtype), torch.tensor(y), alpha=2.0, beta=10.0, base=0.5, chunk_size=7)
    np.testing.assert_allclose(ours.double().numpy(), _xi_reference(x, y, 2.0, 10.0, 0.5), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.1])
def test_centroid_matches_a_loop_over_classes(temperature):
    x, y = _data()
    ours = centroid_score(torch.tensor(x * 3.0), torch.tensor(y), temperature)  # scale: the detector normalises
    np.testing.assert_allclose(ours.double().numpy(), _centroid_reference(x, y, temperature), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_knn_matches_a_sort_over_all_other_samples(k):
    x, y = _data()
    ours = knn_score(torch.tensor(x, dtype=torch.float32), torch.tensor(y), k)
    np.testing.assert_allclose(ours.numpy(), _knn_reference(x, y, k), atol=1e-6)


def _two_clusters_with_one_mislabeled() -> tuple[torch.Tensor, torch.Tensor, int]:
    """Two tight clusters of 12 around orthogonal directions; sample 5 sits in cluster 0 but is labelled 1."""
    rng = np.random.default_rng(1)
    centres = np.eye(4)[:2]
    x = np.concatenate([centres[0] + 0.05 * rng.normal(size=(12, 4)), centres[1] + 0.05 * rng.normal(size=(12, 4))])
    y = np.repeat([0, 1], 12)
    y[5] = 1
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y), 5


@pytest.mark.parametrize("detector", [xi_score, centroid_score, knn_score])
def test_each_detector_ranks_the_mislabeled_sample_first(detector):
    x, y, bad = _two_clusters_with_one_mislabeled()
    score = detector(x, y).numpy()
    assert int(np.argmax(score)) == bad
    noisy = np.arange(len(y)) == bad
    assert detection_scores(score, noisy)[0] == 1.0


def test_noise_rate_estimates_on_two_clean_clusters_and_one_mislabeled_sample():
    from trainables.families.noise_detectors import knn_majority_rate

    x, y, _ = _two_clusters_with_one_mislabeled()
    assert knn_majority_rate(x, y, k=5) == pytest.approx(1 / 24)
    # Every clean sample has all 5 neighbours agreeing (θ → 1, P0 → 0): the binomial estimate is the zero share.
    assert knn_noise_rate(x, y, k=5) == pytest.approx(1 / 24, abs=1e-6)
    assert knn_noise_rate(x, torch.zeros_like(y), k=5) == 0.0 == knn_majority_rate(x, torch.zeros_like(y), k=5)


def test_auroc_and_ap_match_their_definitions():
    rng = np.random.default_rng(3)
    noisy = rng.random(200) < 0.2
    score = rng.normal(size=200) + 1.5 * noisy
    score[:10] = np.round(score[:10])  # a few ties
    auroc, ap = detection_scores(score, noisy)
    # AUROC = P(noisy score > clean score) + ½ P(tie), over all (noisy, clean) pairs.
    pos, neg = score[noisy], score[~noisy]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert auroc == pytest.approx(pairs)
    # AP = mean over the noisy samples of the precision at their score (scores without ties here).
    order = np.argsort(-score, kind="stable")
    hits = noisy[order]
    precision = np.cumsum(hits) / np.arange(1, hits.size + 1)
    untied = len(np.unique(score)) == len(score)
    if untied:
        assert ap == pytest.approx(precision[hits].mean())
    assert (auroc, ap) == (roc_auc_score(noisy, score), average_precision_score(noisy, score))


def _digits(every: int, ratio: float = 0.2, epochs: int = 2):
    return parse_spec(
        {
            "name": "detectors",
            "family": "ms",
            "validation": {"kind": "none"},
            "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": ratio, "seed": 0}},
            "train": {"epochs": epochs, "classes_per_batch": 5, "samples_per_class": 8, "batches_per_epoch": 10},
            "diagnostics": {"every": every},
        }
    )


def test_the_loop_scores_every_detector_against_the_recorded_noise():
    trial = TrialRun.single(_digits(every=1))
    metrics = trial.run_epoch()
    member = trial.member  # the detectors are recomputed from its training embeddings
    embeddings = member.embed(member.data.train)
    labels = torch.as_tensor(member.data.train.labels)
    noisy = member.data.train.noisy_mask
    assert 0.15 < noisy.mean() < 0.25
    for name, detector in (("xi", xi_score), ("centroid", centroid_score), ("knn", knn_score)):
        score = detector(embeddings, labels).double().numpy()
        assert metrics[f"noise/{name}_auroc"] == pytest.approx(roc_auc_score(noisy, score), abs=1e-9)
        assert metrics[f"noise/{name}_ap"] == pytest.approx(average_precision_score(noisy, score), abs=1e-9)
        assert metrics[f"noise/{name}_auroc"] > 0.5, name
        assert metrics[f"noise/{name}_ap"] > noisy.mean(), name  # better than a random ranking


def test_detectors_run_every_n_epochs_and_not_on_clean_labels():
    trial = TrialRun.single(_digits(every=2))
    assert not any(k.startswith("noise/") for k in trial.run_epoch())
    assert "noise/knn_auroc" in trial.run_epoch()
    off = TrialRun.single(_digits(every=0, epochs=1)).run_epoch()
    clean = TrialRun.single(_digits(every=1, ratio=0.0, epochs=1)).run_epoch()
    assert not any(k.startswith("noise/") for k in (*off, *clean))


@pytest.mark.parametrize("spread", [0.1, 0.8, 1.0])
@pytest.mark.parametrize("ratio", [0.1, 0.4])
def test_knn_noise_rate_recovers_the_rate_where_the_majority_vote_overshoots(spread, ratio):
    """40 Gaussian classes of 12 in 16-D, per-class noise: tight clusters (0.1) and ones whose 10 nearest neighbours
    are mostly other classes (1.0: the majority vote calls over half the set noisy at 10 % noise)."""
    from trainables.data.noise import per_class_noise
    from trainables.families.noise_detectors import knn_majority_rate

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(40), 12)
    x = rng.normal(size=(40, 16))[y] + spread * rng.normal(size=(480, 16))
    observed = per_class_noise(y, ratio, rng)
    true_rate = float((observed != y).mean())
    x_t, y_t = torch.tensor(x, dtype=torch.float32), torch.tensor(observed)
    assert knn_noise_rate(x_t, y_t) == pytest.approx(true_rate, abs=0.05)
    if spread == 1.0:
        assert knn_majority_rate(x_t, y_t) > true_rate + 0.3

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from trainables.metrics.neighbours import knn_indices
from trainables.metrics.retrieval import map_at_r_and_r_precision, nmi, recall_at_k, retrieval_metrics, spectral_decay


def _embeddings(n: int = 300, d: int = 16, classes: int = 6, spread: float = 6.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centers = rng.normal(size=(classes, d))
    x = centers[labels] + spread * rng.normal(size=(n, d)) / np.sqrt(d)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def _brute_force_recall(x: np.ndarray, labels: np.ndarray, k: int) -> float:
    hits = 0
    for i in range(len(x)):
        sims = x @ x[i]
        sims[i] = -np.inf  # the query itself never counts
        neighbours = np.argsort(-sims, kind="stable")[:k]
        hits += any(labels[j] == labels[i] for j in neighbours)
    return hits / len(x)


@pytest.mark.parametrize("seed", [0, 1])
def test_recall_at_k_matches_brute_force(seed):
    x, labels = _embeddings(seed=seed)
    ks = (1, 2, 4, 8, 16)
    ours = recall_at_k(x, labels, ks)
    for k in ks:
        assert ours[f"recall_at_{k}"] == pytest.approx(_brute_force_recall(x, labels, k), abs=1e-12)
    assert ours["recall_at_1"] < 1.0  # the data is noisy enough to make the comparison meaningful


def test_self_is_excluded_but_exact_duplicates_count():
    x = np.array([[1, 0], [1, 0], [0, 1], [-1, 0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 2])
    neighbours = knn_indices(x, 1)
    assert neighbours[0, 0] == 1 and neighbours[1, 0] == 0  # each duplicate finds the other, not itself
    assert all(neighbours[i, 0] != i for i in range(4))
    assert recall_at_k(x, labels, (1,))["recall_at_1"] == pytest.approx(0.5)


def test_chunked_search_equals_unchunked():
    x, _ = _embeddings(n=257)
    assert np.array_equal(knn_indices(x, 5, chunk=64), knn_indices(x, 5))


def test_k_must_be_smaller_than_the_set():
    x, _ = _embeddings(n=5)
    with pytest.raises(ValueError, match="k < number of samples"):
        knn_indices(x, 5)


def _pml_map_at_r_and_r_precision(query, query_labels, reference=None, reference_labels=None) -> dict[str, float]:
    """pytorch-metric-learning's AccuracyCalculator (its default L2 faiss k-NN over the whole reference set).

    Without a reference the queries are their own reference and each query's own hit is removed
    (``ref_includes_query=True``); with one, the two sets are disjoint (``ref_includes_query=False``).
    """
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    calculator = AccuracyCalculator(include=("mean_average_precision_at_r", "r_precision"), device=torch.device("cpu"))
    if reference is None:
        out = calculator.get_accuracy(query, query_labels)
    else:
        out = calculator.get_accuracy(query, query_labels, reference, reference_labels, ref_includes_query=False)
    return {"map_at_r": out["mean_average_precision_at_r"], "r_precision": out["r_precision"]}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_at_r_and_r_precision_match_pml_with_the_query_excluded(seed):
    x, labels = _embeddings(seed=seed)
    # A class of one: R = 0, so PML leaves that query out of the means (it does not score it 0). A fresh
    # point, not a copy: an exact duplicate ties, and faiss' IP and L2 searches order ties differently.
    lone = np.random.default_rng(seed + 100).normal(size=(1, x.shape[1]))
    x = np.concatenate([x, (lone / np.linalg.norm(lone)).astype(np.float32)])
    labels = np.concatenate([labels, [99]])
    ours = map_at_r_and_r_precision(x, labels)
    pml = _pml_map_at_r_and_r_precision(x, labels)
    assert ours == pytest.approx(pml, abs=1e-6)
    assert 0.1 < ours["map_at_r"] < ours["r_precision"] < 0.9  # noisy enough to mean something


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_at_r_and_r_precision_match_pml_against_a_gallery(seed):
    x, labels = _embeddings(n=400, seed=seed)
    query, query_labels = x[:150], labels[:150]
    # The gallery lacks class 0: its queries have R = 0 and are left out, as in PML.
    in_gallery = labels[150:] != 0
    gallery, gallery_labels = x[150:][in_gallery], labels[150:][in_gallery]
    assert (query_labels == 0).any()
    ours = map_at_r_and_r_precision(query, query_labels, gallery=(gallery, gallery_labels))
    pml = _pml_map_at_r_and_r_precision(query, query_labels, gallery, gallery_labels)
    assert ours == pytest.approx(pml, abs=1e-6)
    assert 0.1 < ours["map_at_r"] < ours["r_precision"] < 0.9


def test_map_at_r_and_r_precision_by_hand():
    # Unit vectors at these angles (degrees): cosine ranks neighbours by angular distance, no ties.
    degrees = {"a0": 0, "a1": 12, "a2": 35, "a3": 335, "b0": 20, "b1": 90, "b2": 100, "c0": 180}
    angles = np.deg2rad(list(degrees.values()))
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    labels = np.array([name[0] for name in degrees])
    # query: nearest others (R of them, R = class size - 1), hits → R-precision, MAP@R
    # a0 (R=3): a1 b0 a3 → 2/3, (1/1 + 2/3) / 3 = 5/9    (a2 at rank 4 is past R and does not count)
    # a1 (R=3): b0 a0 a2 → 2/3, (1/2 + 2/3) / 3 = 7/18
    # a2 (R=3): b0 a1 a0 → 2/3, (1/2 + 2/3) / 3 = 7/18
    # a3 (R=3): a0 a1 b0 → 2/3, (1/1 + 2/2) / 3 = 2/3
    # b0 (R=2): a1 a2    → 0,   0
    # b1 (R=2): b2 a2    → 1/2, (1/1) / 2 = 1/2
    # b2 (R=2): b1 a2    → 1/2, (1/1) / 2 = 1/2
    # c0 (R=0): left out of both means.
    ours = map_at_r_and_r_precision(x, labels)
    assert ours["r_precision"] == pytest.approx((4 * 2 / 3 + 0 + 1 / 2 + 1 / 2) / 7)  # 11/21
    assert ours["map_at_r"] == pytest.approx((5 / 9 + 7 / 18 + 7 / 18 + 2 / 3 + 0 + 1 / 2 + 1 / 2) / 7)  # 3/7
    # Every class a singleton: no query has R > 0, and both are NaN (as PML returns).
    assert all(np.isnan(v) for v in map_at_r_and_r_precision(x[:2], labels[[0, 4]]).values())


def test_map_at_r_and_r_precision_chunked_equals_unchunked():
    x, labels = _embeddings(n=257)
    q, q_labels, g, g_labels = x[:100], labels[:100], x[100:], labels[100:]
    assert map_at_r_and_r_precision(x, labels, chunk=64) == map_at_r_and_r_precision(x, labels)
    assert map_at_r_and_r_precision(q, q_labels, gallery=(g, g_labels), chunk=7) == map_at_r_and_r_precision(
        q, q_labels, gallery=(g, g_labels)
    )


@pytest.mark.parametrize("spread", [4.0, 6.0])
def test_nmi_matches_sklearn_kmeans_and_drops_to_chance_for_shuffled_labels(spread):
    x, labels = _embeddings(n=400, classes=5, spread=spread)
    sk = normalized_mutual_info_score(labels, KMeans(n_clusters=5, n_init=10, random_state=0).fit_predict(x))
    ours = nmi(x, labels)
    assert 0.7 < sk < 0.99  # overlapping enough that the number means something
    assert ours == pytest.approx(sk, abs=0.03)  # both are k-means optima of the same data
    assert nmi(x, np.random.default_rng(0).permutation(labels)) < 0.05


def test_spectral_decay_matches_a_direct_svd_and_its_limits():
    x, _ = _embeddings(n=200, d=16)
    s = np.linalg.svd(x.astype(np.float64), compute_uv=False)
    p = s / s.sum()
    assert spectral_decay(x) == pytest.approx(float(np.sum(p * np.log(p * len(p)))), rel=1e-6)
    # Equal singular values (orthonormal columns, scaled) → 0; rank 1 → log(d); compression raises it.
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(50, 8)))
    assert spectral_decay(3.0 * q) == pytest.approx(0.0, abs=1e-9)
    assert spectral_decay(np.outer(np.ones(30), np.arange(1.0, 9.0))) == pytest.approx(np.log(8), rel=1e-6)
    squashed = x * np.r_[np.ones(2), np.full(14, 0.05)]
    assert spectral_decay(squashed) > spectral_decay(x) + 0.5


def test_linear_probe_matches_sklearn_logistic_regression_and_counts_unseen_labels_as_misses():
    import torch
    from sklearn.linear_model import LogisticRegression

    from trainables.metrics.contrastive import linear_probe_accuracy

    x, labels = _embeddings(n=600, d=16, classes=6, spread=5.0, seed=3)
    train, test = slice(0, 400), slice(400, 600)
    ours = linear_probe_accuracy(
        torch.from_numpy(x[train]), labels[train], torch.from_numpy(x[test]), labels[test], weight_decay=1e-3
    )
    # Same objective: mean cross-entropy + wd·‖W‖² ⇔ sklearn's C = 1 / (2·wd·n).
    sk = LogisticRegression(C=1 / (2 * 1e-3 * 400), max_iter=2000).fit(x[train], labels[train])
    assert 0.5 < ours["acc1"] < 1.0  # hard enough to mean something
    assert ours["acc1"] == pytest.approx(sk.score(x[test], labels[test]), abs=0.02)
    assert ours["acc1"] < ours["acc5"] <= 1.0
    # Relabel 50 test samples with a class the probe never saw: exactly those become misses.
    unseen = labels[test].copy()
    unseen[:50] = 99
    missed = linear_probe_accuracy(
        torch.from_numpy(x[train]), labels[train], torch.from_numpy(x[test]), unseen, weight_decay=1e-3
    )
    tail = linear_probe_accuracy(
        torch.from_numpy(x[train]),
        labels[train],
        torch.from_numpy(x[400 + 50 :]),
        labels[400 + 50 :],
        weight_decay=1e-3,
    )
    for name in ("acc1", "acc5"):
        assert missed[name] == pytest.approx(tail[name] * 150 / 200)


@pytest.mark.parametrize("with_gallery", [False, True])
def test_retrieval_metrics_one_search_equals_brute_force_and_pml(with_gallery):
    """retrieval_metrics searches the kNN once for Recall@k and MAP@R: the same numbers as brute force and PML."""
    x, labels = _embeddings(n=400, seed=3)
    ks = (1, 2, 4, 8)
    if with_gallery:
        query, query_labels, gallery = x[:150], labels[:150], (x[150:], labels[150:])
        ours = retrieval_metrics(query, query_labels, ks, gallery=gallery)
        pml = _pml_map_at_r_and_r_precision(query, query_labels, *gallery)
        sims = query @ gallery[0].T
        for k in ks:
            top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            brute = np.mean((gallery[1][top] == query_labels[:, None]).any(axis=1))
            assert ours[f"recall_at_{k}"] == pytest.approx(brute, abs=1e-12)
    else:
        ours = retrieval_metrics(x, labels, ks)
        pml = _pml_map_at_r_and_r_precision(x, labels)
        for k in ks:
            assert ours[f"recall_at_{k}"] == pytest.approx(_brute_force_recall(x, labels, k), abs=1e-12)
    assert {k: ours[k] for k in pml} == pytest.approx(pml, abs=1e-6)
    assert ours["recall_at_1"] < 1.0 and 0.1 < ours["map_at_r"] < 0.9

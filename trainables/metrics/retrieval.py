"""Retrieval metrics on faiss: Recall@k, MAP@R and R-precision over the test set (self excluded) and NMI of
k-means clusters; the spectral decay of the test embeddings.

Embeddings are L2-normalised, so inner product is cosine similarity and ranks like Euclidean distance. The kNN
search and what it searches in are :mod:`trainables.metrics.neighbours`'.
"""

from __future__ import annotations

import faiss
import numpy as np
from sklearn.metrics import normalized_mutual_info_score

from trainables.metrics.neighbours import knn_indices, relevant_counts, searched_set, use_faiss_gpu
from trainables.metrics.registry import RECALL_AT_K, computes
from trainables.schema.metric_names import MAP_AT_R, NMI, R_PRECISION, SPECTRAL_DECAY, recall_at

__all__ = ["recall_at_k", "map_at_r_and_r_precision", "nmi", "spectral_decay", "retrieval_metrics"]


@computes(RECALL_AT_K)
def recall_at_k(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: tuple[int, ...],
    gallery: tuple[np.ndarray, np.ndarray] | None = None,
    neighbours: np.ndarray | None = None,
) -> dict[str, float]:
    """Recall@k for each k: share of samples with a same-class sample among their k nearest neighbours.

    With ``gallery = (embeddings, labels)`` the neighbours are searched in the gallery instead (In-Shop).
    ``neighbours``: :func:`knn_indices` of these embeddings with at least ``max(ks)`` columns, already searched.
    """
    labels = np.asarray(labels)
    base, base_labels = searched_set(labels, gallery)
    if neighbours is None:
        neighbours = knn_indices(embeddings, max(ks), gallery=base)
    neighbours = neighbours[:, : max(ks)]
    hits = base_labels[neighbours] == labels[:, None]
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), np.iinfo(np.int64).max)
    return {recall_at(k): float(np.mean(first_hit < k)) for k in ks}


@computes(MAP_AT_R, R_PRECISION)
def map_at_r_and_r_precision(
    embeddings: np.ndarray,
    labels: np.ndarray,
    gallery: tuple[np.ndarray, np.ndarray] | None = None,
    chunk: int = 16384,
    neighbours: np.ndarray | None = None,
) -> dict[str, float]:
    """MAP@R and R-precision (Musgrave et al. 2020, "A Metric Learning Reality Check"), means over queries.

    R is the number of other samples of the query's class: the query itself excluded, or, with ``gallery =
    (embeddings, labels)`` (In-Shop), the gallery samples of its class. R-precision is the same-class share of
    the R nearest neighbours; MAP@R averages the precision at each same-class rank ``i <= R`` over R, so unlike
    Recall@k it also rewards ranking the whole class first. As pytorch-metric-learning's AccuracyCalculator,
    queries with ``R = 0`` are left out of the means, and both are NaN when no query has ``R > 0``. Only
    ``max R`` neighbours are searched, in chunks of ``chunk`` queries, unless ``neighbours`` (:func:`knn_indices`
    with at least ``max R`` columns) were already searched.
    """
    labels = np.asarray(labels)
    base, base_labels = searched_set(labels, gallery)
    r = relevant_counts(labels, base_labels, exclude_self=gallery is None)
    if not np.any(r > 0):
        return {MAP_AT_R: float("nan"), R_PRECISION: float("nan")}
    k = int(r.max())
    if neighbours is None:
        neighbours = knn_indices(embeddings, k, chunk=chunk, gallery=base)
    neighbours = neighbours[:, :k]
    ranks = np.arange(1, k + 1)
    # Per query: same-class neighbours among its first R, and the sum of the precisions at those ranks.
    n_hits, precision_sum = np.zeros(len(labels)), np.zeros(len(labels))
    for start in range(0, len(labels), chunk):
        rows = slice(start, start + chunk)
        hits = (base_labels[neighbours[rows]] == labels[rows, None]) & (ranks <= r[rows, None])
        n_hits[rows] = hits.sum(axis=1)
        precision_sum[rows] = np.sum(np.cumsum(hits, axis=1) / ranks * hits, axis=1)
    scored = r > 0
    return {
        MAP_AT_R: float(np.mean(precision_sum[scored] / r[scored])),
        R_PRECISION: float(np.mean(n_hits[scored] / r[scored])),
    }


@computes(NMI)
def nmi(embeddings: np.ndarray, labels: np.ndarray, seed: int = 0, niter: int = 20, nredo: int | None = None) -> float:
    """NMI between the labels and k-means clusters (as many clusters as classes).

    faiss seeds k-means with random points, and one start often merges two clusters; ``nredo`` restarts
    keep the lowest-objective run. Default: 5 restarts up to 1000 classes, 1 above (SOP's 11k classes).
    """
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    n_clusters = int(np.unique(labels).size)
    if nredo is None:
        nredo = 5 if n_clusters <= 1000 else 1
    # A retrieval test set has few samples per class by nature (CUB ~30, glyphs 16): faiss' "at least 39 points
    # per centroid" warning only fills the logs, so the floor is 1 (it warns, it does not change the result).
    kmeans = faiss.Kmeans(
        x.shape[1],
        n_clusters,
        niter=niter,
        nredo=nredo,
        seed=seed,
        gpu=use_faiss_gpu(),
        verbose=False,
        min_points_per_centroid=1,
    )
    kmeans.train(x)
    _, assignment = kmeans.index.search(x, 1)
    return float(normalized_mutual_info_score(labels, assignment.ravel()))


@computes(SPECTRAL_DECAY)
def spectral_decay(embeddings: np.ndarray) -> float:
    """KL divergence of the normalised singular-value spectrum from the uniform distribution (``rho``).

    DiVA (Milbich et al. 2020, Sec. 5 "Generalization and embedding space compression", after Roth et al.
    2020): fewer directions of significant variance, i.e. a more compressed embedding space, give a larger
    value; ``0`` when every direction carries the same singular value, ``log(d)`` for a rank-1 set. The
    singular values come from the ``D×D`` Gram matrix, so SOP's 60k test rows cost one ``D×D`` eigensolve.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    eigenvalues = np.linalg.eigvalsh(x.T @ x)[::-1][: min(x.shape)]
    s = np.sqrt(np.clip(eigenvalues, 0.0, None))
    p = s / s.sum()
    nonzero = p > 0
    return float(np.sum(p[nonzero] * np.log(p[nonzero] * len(p))))


def retrieval_metrics(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: tuple[int, ...],
    seed: int = 0,
    gallery: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """Recall@k, MAP@R and R-precision (queries against ``gallery`` when given); NMI and spectral decay over every
    evaluated embedding. One kNN search serves Recall@k and MAP@R (the most neighbours either needs)."""
    labels = np.asarray(labels)
    base, base_labels = searched_set(labels, gallery)
    k = max(max(ks), int(relevant_counts(labels, base_labels, exclude_self=gallery is None).max()))
    neighbours = knn_indices(embeddings, k, gallery=base)
    recalls = recall_at_k(embeddings, labels, ks, gallery=gallery, neighbours=neighbours)
    recalls.update(map_at_r_and_r_precision(embeddings, labels, gallery=gallery, neighbours=neighbours))
    if gallery is not None:
        embeddings, labels = np.concatenate([embeddings, gallery[0]]), np.concatenate([labels, gallery[1]])
    return {**recalls, NMI: nmi(embeddings, labels, seed=seed), SPECTRAL_DECAY: spectral_decay(embeddings)}

"""Retrieval metrics on faiss: Recall@k, MAP@R and R-precision over the test set (self excluded) and NMI of
k-means clusters; the spectral decay of the test embeddings; the paired and linear-probe metrics.

Each metric function is registered under the names it returns (:func:`trainables.metric_registry.computes`); the
spec layer reads that registry, not this module, so it knows what a trial reports without importing faiss or torch.

Embeddings are L2-normalised, so inner product is cosine similarity and ranks like Euclidean distance.
The GPU index is used only when faiss was built with GPU support and sees a GPU.
"""

from __future__ import annotations

import functools

import faiss
import numpy as np
import torch
from sklearn.metrics import normalized_mutual_info_score

from trainables.metric_registry import RECALL_AT_K, computes
from trainables.schema.metric_names import (
    ACC1,
    ACC5,
    MAP_AT_R,
    NMI,
    PAIRED_COSINE,
    PAIRED_MAE,
    R_PRECISION,
    SPECTRAL_DECAY,
    recall_at,
)

__all__ = [
    "linear_probe_accuracy",
    "paired_metrics",
    "knn_indices",
    "recall_at_k",
    "map_at_r_and_r_precision",
    "nmi",
    "retrieval_metrics",
    "spectral_decay",
    "use_faiss_gpu",
]


def use_faiss_gpu() -> bool:
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


@functools.cache
def _gpu_resources() -> faiss.StandardGpuResources:
    # One per process: creating it allocates GPU scratch memory, and evaluation runs every epoch.
    return faiss.StandardGpuResources()


def _flat_ip_index(dim: int) -> faiss.Index:
    index: faiss.Index = faiss.IndexFlatIP(dim)
    if use_faiss_gpu():
        index = faiss.index_cpu_to_gpu(_gpu_resources(), 0, index)
    return index


def knn_indices(embeddings: np.ndarray, k: int, chunk: int = 16384, gallery: np.ndarray | None = None) -> np.ndarray:
    """Indices of each row's ``k`` nearest other rows (largest inner product), shape ``(N, k)``.

    The query itself is removed by index, not by position, so duplicates of a point still count as
    neighbours. Queries are searched in chunks so a large set (SOP's 60k) does not need an N×N result.
    With ``gallery`` (In-Shop), the rows are queries and the indices point into the gallery; nothing is
    excluded since the two sets are disjoint.
    """
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    base = x if gallery is None else np.ascontiguousarray(gallery, dtype=np.float32)
    n = x.shape[0]
    if gallery is None and not 1 <= k < n:
        raise ValueError(f"1 <= k < number of samples must hold, but got {k=}, {n=}")
    if gallery is not None and not 1 <= k <= len(base):
        raise ValueError(f"1 <= k <= gallery size must hold, but got {k=}, {len(base)=}")
    index = _flat_ip_index(x.shape[1])
    index.add(base)
    extra = int(gallery is None)  # one more hit to drop the query itself
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        q = x[start : start + chunk]
        _, idx = index.search(q, k + extra)
        if extra:
            is_self = idx == np.arange(start, start + len(q))[:, None]
            # Stable sort on the boolean puts the self hit (if any) last; then keep the first k.
            idx = np.take_along_axis(idx, np.argsort(is_self, axis=1, kind="stable"), axis=1)
        out[start : start + len(q)] = idx[:, :k]
    return out


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
    base, base_labels = _searched_set(labels, gallery)
    if neighbours is None:
        neighbours = knn_indices(embeddings, max(ks), gallery=base)
    neighbours = neighbours[:, : max(ks)]
    hits = base_labels[neighbours] == labels[:, None]
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), np.iinfo(np.int64).max)
    return {recall_at(k): float(np.mean(first_hit < k)) for k in ks}


def _searched_set(
    labels: np.ndarray, gallery: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """What the queries are searched in: (``knn_indices``' ``gallery`` argument, its labels); the queries themselves
    (``None``, ``labels``) unless a separate gallery is given."""
    return (None, labels) if gallery is None else (gallery[0], np.asarray(gallery[1]))


def _relevant_counts(labels: np.ndarray, base_labels: np.ndarray, exclude_self: bool) -> np.ndarray:
    """R per query: the samples of its class among ``base_labels``, less the query itself when it is one of them."""
    classes, counts = np.unique(base_labels, return_counts=True)
    pos = np.searchsorted(classes, labels).clip(max=len(classes) - 1)
    return np.where(classes[pos] == labels, counts[pos], 0) - int(exclude_self)


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
    base, base_labels = _searched_set(labels, gallery)
    r = _relevant_counts(labels, base_labels, exclude_self=gallery is None)
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
    base, base_labels = _searched_set(labels, gallery)
    k = max(max(ks), int(_relevant_counts(labels, base_labels, exclude_self=gallery is None).max()))
    neighbours = knn_indices(embeddings, k, gallery=base)
    recalls = recall_at_k(embeddings, labels, ks, gallery=gallery, neighbours=neighbours)
    recalls.update(map_at_r_and_r_precision(embeddings, labels, gallery=gallery, neighbours=neighbours))
    if gallery is not None:
        embeddings, labels = np.concatenate([embeddings, gallery[0]]), np.concatenate([labels, gallery[1]])
    return {**recalls, NMI: nmi(embeddings, labels, seed=seed), SPECTRAL_DECAY: spectral_decay(embeddings)}


@computes(PAIRED_MAE, PAIRED_COSINE)
def paired_metrics(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The debiased-contrastive thesis' §4.1 metrics between paired embeddings ``x_i``, ``y_i`` (the model outputs of
    the two modalities of test sample i): ``paired_mae = (1/n) Σ ||x_i − y_i||₂`` (its "MAE": the Euclidean norm of
    the difference, as the formula writes it) and ``paired_cosine = (1/n) Σ <x_i, y_i> / (||x_i|| ||y_i||)``."""
    x, y = x.double(), y.double()
    return {
        PAIRED_MAE: float((x - y).norm(dim=1).mean()),
        PAIRED_COSINE: float(torch.nn.functional.cosine_similarity(x, y, dim=1).mean()),
    }


@computes(ACC1, ACC5)
def linear_probe_accuracy(
    train: torch.Tensor,
    train_labels: np.ndarray,
    test: torch.Tensor,
    test_labels: np.ndarray,
    weight_decay: float = 1e-4,
    max_iter: int = 100,
) -> dict[str, float]:
    """Top-1 / top-5 test accuracy of a linear softmax classifier fitted on frozen training embeddings.

    The contrastive-learning protocol (SimCLR's linear evaluation; the debiased-contrastive thesis' CIFAR-10
    Acc@1/Acc@5): full-batch L-BFGS on the cross-entropy plus ``weight_decay·‖W‖²``, from zero weights, on the
    embeddings' device, so it is deterministic. A test label the probe never saw counts as a miss. ``train_labels``
    are the observed (possibly noisy) labels: the probe sees what the trial trained on.
    """
    classes, y = np.unique(np.asarray(train_labels), return_inverse=True)
    device = train.device
    x = train.detach().float().clone()  # embeddings made under inference_mode cannot enter autograd
    targets = torch.as_tensor(y, device=device)
    linear = torch.nn.Linear(x.shape[1], len(classes)).to(device)
    torch.nn.init.zeros_(linear.weight)
    torch.nn.init.zeros_(linear.bias)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(linear(x), targets) + weight_decay * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        ranked = linear(test.detach().float()).argsort(dim=1, descending=True).cpu().numpy()
    predicted = classes[ranked]
    hits = predicted == np.asarray(test_labels)[:, None]
    return {name: float(hits[:, :k].any(axis=1).mean()) for name, k in ((ACC1, 1), (ACC5, 5))}

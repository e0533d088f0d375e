"""The nearest-neighbour search every retrieval metric shares: faiss' flat inner-product index (on the GPU when faiss
was built with GPU support and sees one), what the queries are searched in, and R, the relevant samples per query.

Public within :mod:`trainables.metrics` (:mod:`~trainables.metrics.retrieval` and :mod:`~trainables.metrics.categories`
search the same way, so their per-query values agree); :func:`knn_indices` also serves the noise detectors.
"""

from __future__ import annotations

import functools

import faiss
import numpy as np

__all__ = ["knn_indices", "relevant_counts", "searched_set", "use_faiss_gpu"]


def use_faiss_gpu() -> bool:
    """Whether faiss was built with GPU support and sees a GPU (then the index and k-means run there)."""
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


def searched_set(
    labels: np.ndarray, gallery: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """What the queries are searched in: (``knn_indices``' ``gallery`` argument, its labels); the queries themselves
    (``None``, ``labels``) unless a separate gallery is given."""
    return (None, labels) if gallery is None else (gallery[0], np.asarray(gallery[1]))


def relevant_counts(labels: np.ndarray, base_labels: np.ndarray, exclude_self: bool) -> np.ndarray:
    """R per query: the samples of its class among ``base_labels``, less the query itself when it is one of them."""
    classes, counts = np.unique(base_labels, return_counts=True)
    pos = np.searchsorted(classes, labels).clip(max=len(classes) - 1)
    return np.where(classes[pos] == labels, counts[pos], 0) - int(exclude_self)

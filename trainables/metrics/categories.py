"""Per-category retrieval metrics: Recall@1 and MAP@R over the queries of each category (a CSV dataset's
``category`` column), as open-metric-learning reports them.

Each query is searched in the whole searched set (the other test images, or In-Shop's gallery), exactly as for the
overall metrics; only the averaging is per category, so the mean over every query of the per-query values is the
overall Recall@1 and MAP@R of :mod:`trainables.metrics.retrieval`. Neither pytorch-metric-learning nor faiss groups
queries by an attribute, and OML's implementation needs its own pipeline, so the grouping is written here on the
per-query values; the search is the same faiss one (:mod:`trainables.metrics.neighbours`).
"""

from __future__ import annotations

import numpy as np

from trainables.metrics.neighbours import knn_indices, relevant_counts, searched_set
from trainables.schema.metric_names import MAP_AT_R, per_category, recall_at

__all__ = ["per_query_retrieval", "per_category_metrics"]


def per_query_retrieval(
    embeddings: np.ndarray, labels: np.ndarray, gallery: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: whether its nearest neighbour shares its class (Recall@1's hit), and its average precision over
    its R same-class neighbours (MAP@R's term; NaN where ``R = 0``, which MAP@R leaves out)."""
    labels = np.asarray(labels)
    base, base_labels = searched_set(labels, gallery)
    r = relevant_counts(labels, base_labels, exclude_self=gallery is None)
    neighbours = knn_indices(embeddings, max(1, int(r.max())), gallery=base)
    hits = base_labels[neighbours] == labels[:, None]
    ranks = np.arange(1, neighbours.shape[1] + 1)
    within = hits & (ranks <= r[:, None])
    precision_sum = np.sum(np.cumsum(within, axis=1) / ranks * within, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(r > 0, precision_sum / r, np.nan)
    return hits[:, 0].astype(np.float64), ap


def per_category_metrics(
    embeddings: np.ndarray,
    labels: np.ndarray,
    categories: np.ndarray,
    gallery: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """``category/<category>/recall_at_1`` and ``.../map_at_r`` for every category of the queries."""
    hit, ap = per_query_retrieval(embeddings, labels, gallery)
    categories = np.asarray(categories)
    out: dict[str, float] = {}
    for category in sorted(set(categories.tolist())):
        mine = categories == category
        scored = ap[mine][~np.isnan(ap[mine])]
        out[per_category(category, recall_at(1))] = float(hit[mine].mean())
        out[per_category(category, MAP_AT_R)] = float(scored.mean()) if scored.size else float("nan")
    return out

"""Recall@k and MAP@R broken down by class: per class, the sum of its queries' values and how many queries count.

The study's reliability of a cell's choice (:mod:`study.final.reliability`) resamples the validation *classes*, so it
needs each class's share of a metric, not only the mean. The definitions are :mod:`trainables.metrics.retrieval`'s,
exactly (the same kNN search, :mod:`trainables.metrics.neighbours`): a query's Recall@k value is 1 when a same-class
sample is among its k nearest neighbours, its MAP@R value its AP@R, and queries with ``R = 0`` are left out of MAP@R.
So, on the same data, ``sums.sum() / counts.sum()`` of a :class:`PerClass` is the metric
:func:`~trainables.metrics.retrieval.recall_at_k` or :func:`~trainables.metrics.retrieval.map_at_r_and_r_precision`
reports.

:func:`to_record` and :func:`from_record` write it to and read it from a trial's record (JSON: lists of ints, the sums
rounded to 6 significant digits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainables.metrics.neighbours import knn_indices, relevant_counts, searched_set
from trainables.schema.metric_names import MAP_AT_R, recall_at

__all__ = ["PerClass", "per_class_scores", "to_record", "from_record"]

#: Significant digits of the sums in a record (a class's sum of AP@R values is a float; Recall@k sums are integers).
RECORD_DIGITS = 6


@dataclass(frozen=True, eq=False)
class PerClass:
    """One metric per class: ``classes`` (the class labels, sorted, ``int64``), ``sums`` (per class, the sum over its
    queries of the per-query value, ``float64``) and ``counts`` (per class, the queries that count, ``int64``).

    The arrays are read-only, one entry per class. The metric over all queries is :attr:`value`.
    """

    classes: np.ndarray
    sums: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        arrays = {
            "classes": np.array(self.classes, dtype=np.int64),
            "sums": np.array(self.sums, dtype=np.float64),
            "counts": np.array(self.counts, dtype=np.int64),
        }
        for name, array in arrays.items():
            if array.ndim != 1 or len(array) != len(arrays["classes"]):
                raise ValueError(f"PerClass.{name} must be 1-D with one entry per class, got shape {array.shape}")
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        if np.any(np.diff(arrays["classes"]) <= 0):
            raise ValueError("PerClass.classes must be sorted and distinct")
        if np.any(arrays["counts"] < 0):
            raise ValueError("PerClass.counts must not be negative")

    @property
    def value(self) -> float:
        """The metric over every query that counts: ``sums.sum() / counts.sum()`` (NaN when none counts)."""
        total = int(self.counts.sum())
        return float(self.sums.sum() / total) if total else float("nan")


def _by_class(labels: np.ndarray, values: np.ndarray, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, sums, counts)`` of ``values`` over the ``counted`` queries, per class of ``labels``."""
    classes, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.ravel()
    sums = np.bincount(inverse, weights=np.where(counted, values, 0.0), minlength=len(classes))
    counts = np.bincount(inverse, weights=counted.astype(np.float64), minlength=len(classes)).astype(np.int64)
    return classes, sums, counts


def _precision_sums(
    labels: np.ndarray, base_labels: np.ndarray, neighbours: np.ndarray, r: np.ndarray, chunk: int
) -> np.ndarray:
    """Per query, the sum of the precisions at its same-class ranks ``i <= R`` (retrieval.py's AP@R numerator), in
    chunks of ``chunk`` queries."""
    ranks = np.arange(1, neighbours.shape[1] + 1)
    out = np.zeros(len(labels))
    for start in range(0, len(labels), chunk):
        rows = slice(start, start + chunk)
        hits = (base_labels[neighbours[rows]] == labels[rows, None]) & (ranks <= r[rows, None])
        out[rows] = np.sum(np.cumsum(hits, axis=1) / ranks * hits, axis=1)
    return out


def per_class_scores(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: tuple[int, ...],
    gallery: tuple[np.ndarray, np.ndarray] | None = None,
    neighbours: np.ndarray | None = None,
    chunk: int = 16384,
) -> dict[str, PerClass]:
    """Recall@k for each k in ``ks`` (:func:`~trainables.schema.metric_names.recall_at`) and MAP@R, per query class.

    Recall@k counts every query (its classes are all the query classes); MAP@R counts the queries with ``R > 0``
    and keeps the classes that have one (a class of one sample without a gallery, or one the gallery lacks, has
    none). With ``gallery = (embeddings, labels)`` the neighbours are searched in the gallery (In-Shop).
    ``neighbours``: :func:`~trainables.metrics.neighbours.knn_indices` of these embeddings, already searched, with
    at least ``max(max(ks), max R)`` columns (as :func:`~trainables.metrics.retrieval.retrieval_metrics` searches).
    MAP@R is computed over ``chunk`` queries at a time, as retrieval.py does.
    """
    labels = np.asarray(labels)
    base, base_labels = searched_set(labels, gallery)
    r = relevant_counts(labels, base_labels, exclude_self=gallery is None)
    k = max(max(ks), int(r.max(initial=0)))
    if neighbours is None:
        neighbours = knn_indices(embeddings, k, gallery=base)
    if neighbours.shape[1] < k:
        raise ValueError(f"neighbours has {neighbours.shape[1]} columns, but Recall@k and MAP@R need {k}")
    hits = base_labels[neighbours[:, : max(ks)]] == labels[:, None]
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), np.iinfo(np.int64).max)
    every = np.ones(len(labels), dtype=bool)
    out = {recall_at(kk): PerClass(*_by_class(labels, (first_hit < kk).astype(np.float64), every)) for kk in ks}
    precision_sum = _precision_sums(labels, base_labels, neighbours[:, :k], r, chunk)
    scored = r > 0
    ap = np.where(scored, precision_sum / np.maximum(r, 1), 0.0)
    classes, sums, counts = _by_class(labels, ap, scored)
    kept = counts > 0
    out[MAP_AT_R] = PerClass(classes[kept], sums[kept], counts[kept])
    return out


def _rounded(value: float) -> int | float:
    """``value`` to :data:`RECORD_DIGITS` significant digits; an integral value as an ``int`` (shorter JSON)."""
    v = float(f"{value:.{RECORD_DIGITS}g}")
    return int(v) if v.is_integer() else v


def to_record(pc: PerClass) -> dict[str, list[Any]]:
    """``{"classes": [int], "sums": [number], "counts": [int]}``: JSON-safe, the sums to 6 significant digits."""
    return {
        "classes": [int(c) for c in pc.classes],
        "sums": [_rounded(s) for s in pc.sums],
        "counts": [int(n) for n in pc.counts],
    }


def from_record(d: Mapping[str, Any]) -> PerClass:
    """The :class:`PerClass` :func:`to_record` wrote (sums as rounded there)."""
    return PerClass(classes=d["classes"], sums=d["sums"], counts=d["counts"])

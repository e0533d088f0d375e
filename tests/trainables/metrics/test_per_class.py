from __future__ import annotations

import json

import numpy as np
import pytest

from trainables.metrics.neighbours import knn_indices
from trainables.metrics.per_class import PerClass, from_record, per_class_scores, to_record
from trainables.metrics.retrieval import map_at_r_and_r_precision, recall_at_k
from trainables.schema.metric_names import MAP_AT_R, recall_at

KS = (1, 2, 4, 8)


def _embeddings(n: int = 240, d: int = 12, classes: int = 9, spread: float = 6.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    labels[0] = classes + 5  # a class of one: R = 0 without a gallery
    centers = rng.normal(size=(classes + 6, d))
    x = centers[labels] + spread * rng.normal(size=(n, d)) / np.sqrt(d)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def _check(per_class: dict[str, PerClass], expected: dict[str, float], labels: np.ndarray) -> None:
    assert set(per_class) == {*(recall_at(k) for k in KS), MAP_AT_R}
    for k in KS:
        pc = per_class[recall_at(k)]
        assert np.array_equal(pc.classes, np.unique(labels))
        assert pc.counts.sum() == len(labels)
        assert np.isclose(pc.sums.sum() / pc.counts.sum(), expected[recall_at(k)], rtol=1e-12, atol=1e-12)
        assert pc.value == pytest.approx(expected[recall_at(k)], abs=1e-12)
    pc = per_class[MAP_AT_R]
    assert np.all(pc.counts > 0)
    assert np.isclose(pc.sums.sum() / pc.counts.sum(), expected[MAP_AT_R], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sums_over_counts_equal_the_metric_without_a_gallery(seed):
    x, labels = _embeddings(seed=seed)
    per_class = per_class_scores(x, labels, KS)
    expected = {**recall_at_k(x, labels, KS), **map_at_r_and_r_precision(x, labels)}
    _check(per_class, expected, labels)
    assert labels[0] not in per_class[MAP_AT_R].classes  # its one query has R = 0
    assert per_class[MAP_AT_R].counts.sum() == len(labels) - 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sums_over_counts_equal_the_metric_against_a_gallery(seed):
    x, labels = _embeddings(n=300, seed=seed)
    query, query_labels = x[:120], labels[:120]
    # The gallery lacks class 0: its queries have R = 0, left out of MAP@R as retrieval.py leaves them.
    keep = labels[120:] != 0
    gallery = (x[120:][keep], labels[120:][keep])
    per_class = per_class_scores(query, query_labels, KS, gallery=gallery)
    expected = {
        **recall_at_k(query, query_labels, KS, gallery=gallery),
        **map_at_r_and_r_precision(query, query_labels, gallery=gallery),
    }
    _check(per_class, expected, query_labels)
    assert 0 in query_labels and 0 not in per_class[MAP_AT_R].classes


def test_already_searched_neighbours_and_chunks_give_the_same():
    x, labels = _embeddings(seed=5)
    searched = per_class_scores(x, labels, KS)
    neighbours = knn_indices(x, 100)
    again = per_class_scores(x, labels, KS, neighbours=neighbours, chunk=17)
    for name, pc in searched.items():
        assert np.array_equal(pc.classes, again[name].classes)
        assert np.array_equal(pc.counts, again[name].counts)
        assert np.allclose(pc.sums, again[name].sums, rtol=1e-12)
    with pytest.raises(ValueError, match="columns"):
        per_class_scores(x, labels, KS, neighbours=neighbours[:, :3])


def test_record_round_trip():
    x, labels = _embeddings(seed=6)
    for pc in per_class_scores(x, labels, KS).values():
        record = to_record(pc)
        text = json.dumps(record)
        assert set(record) == {"classes", "sums", "counts"}
        back = from_record(json.loads(text))
        assert np.array_equal(back.classes, pc.classes) and back.classes.dtype == np.int64
        assert np.array_equal(back.counts, pc.counts) and back.counts.dtype == np.int64
        assert np.allclose(back.sums, pc.sums, rtol=5.1e-6, atol=0)  # half a unit in the 6th digit
        assert all(len(repr(s).rstrip("0")) <= 9 for s in record["sums"])  # 6 significant digits at most
        assert from_record(to_record(back)).sums.tolist() == back.sums.tolist()  # rounding is idempotent


def test_per_class_is_frozen_and_checked():
    pc = PerClass(classes=[1, 4], sums=[0.5, 2], counts=[1, 3])
    assert pc.classes.dtype == np.int64 and pc.sums.dtype == np.float64
    assert pc.value == pytest.approx(2.5 / 4)
    with pytest.raises(ValueError):
        pc.sums[0] = 1.0  # read-only
    with pytest.raises(ValueError, match="one entry per class"):
        PerClass(classes=[1, 4], sums=[0.5], counts=[1, 3])
    with pytest.raises(ValueError, match="sorted"):
        PerClass(classes=[4, 1], sums=[0.5, 2], counts=[1, 3])

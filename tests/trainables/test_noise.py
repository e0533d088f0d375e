from __future__ import annotations

import numpy as np
import pytest

from schema.spec import DatasetSpec
from trainables.data import load_dataset
from trainables.data.noise import per_class_noise, uniform_noise


def _labels(classes: int = 10, per_class: int = 50) -> np.ndarray:
    return np.repeat(np.arange(classes), per_class)


@pytest.mark.parametrize("ratio", [0.1, 0.2, 0.3])
def test_per_class_noise_moves_the_ratio_of_every_class_and_every_class_receives(ratio):
    labels = _labels()
    noisy = per_class_noise(labels, ratio, np.random.default_rng(0))
    for c in range(10):
        moved = np.mean(noisy[labels == c] != c)
        assert moved == pytest.approx(ratio)
        received = np.sum((noisy == c) & (labels != c))
        assert received > 0
    assert np.all(noisy[noisy != labels] != labels[noisy != labels])


def test_uniform_noise_flips_at_rate_p_to_other_classes_uniformly():
    labels = _labels(classes=5, per_class=4000)
    noisy = uniform_noise(labels, 0.3, np.random.default_rng(1))
    flipped = noisy != labels
    assert flipped.mean() == pytest.approx(0.3, abs=0.01)
    targets = np.bincount(noisy[flipped & (labels == 0)], minlength=5)
    assert targets[0] == 0 and np.all(np.abs(targets[1:] / targets[1:].sum() - 0.25) < 0.03)


def test_noise_is_reproducible_by_seed_and_never_touches_test_labels():
    spec = DatasetSpec(name="digits", noise={"kind": "per_class", "ratio": 0.2, "seed": 3})
    a, b = load_dataset(spec, 0), load_dataset(spec, 1)
    c = load_dataset(DatasetSpec(name="digits", noise={"kind": "per_class", "ratio": 0.2, "seed": 4}), 0)
    clean = load_dataset(DatasetSpec(name="digits"), 0)
    assert np.array_equal(a.train.labels, b.train.labels) and not np.array_equal(a.train.labels, c.train.labels)
    assert np.array_equal(a.test.labels, clean.test.labels) and not a.test.noisy_mask.any()
    assert np.array_equal(a.train.true_labels, clean.train.labels)
    assert a.train.noisy_mask.mean() == pytest.approx(0.2, abs=0.01)


def test_clean_only_subset_is_the_topline_arm():
    noisy = DatasetSpec(name="digits", noise={"kind": "uniform", "ratio": 0.3, "seed": 0})
    full = load_dataset(noisy, 0)
    topline = load_dataset(noisy.model_copy(update={"subset": "clean_only"}), 0)
    assert len(topline.train) == int((~full.train.noisy_mask).sum())
    assert not topline.train.noisy_mask.any()

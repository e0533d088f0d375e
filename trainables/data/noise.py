"""Label noise injected into training labels (test labels are never touched).

- ``per_class`` (BSPML protocol, https://arxiv.org/abs/2212.01848 Sec. 5): in every class, ``round(ratio·N^c)``
  samples are moved to other classes chosen so that every class receives some.
- ``uniform`` (noise paper, "embedding losses under label noise" Sec. 3): each label flips with probability
  ``ratio`` to a uniformly chosen other class.

The noisy mask is ``split.labels != split.true_labels``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from schema.spec import NoiseSpec
    from trainables.data._splits import LabeledSplit

__all__ = ["apply_label_noise", "per_class_noise", "uniform_noise"]


def per_class_noise(labels: np.ndarray, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """Move ``round(ratio·N^c)`` samples of each class c to other classes, spread over all targets."""
    classes = np.unique(labels)
    noisy = labels.copy()
    if classes.size < 2 or ratio == 0:
        return noisy
    offset = 0  # rotates the target assignment across classes so every class receives some samples
    for c in classes:
        members = np.flatnonzero(labels == c)
        n_move = int(round(ratio * members.size))
        if n_move == 0:
            continue
        chosen = rng.choice(members, size=n_move, replace=False)
        others = classes[classes != c]
        targets = others[(np.arange(n_move) + offset) % others.size]
        offset += n_move
        noisy[chosen] = rng.permutation(targets)
    return noisy


def uniform_noise(labels: np.ndarray, ratio: float, rng: np.random.Generator) -> np.ndarray:
    """Flip each label with probability ``ratio`` to a uniformly chosen *other* class."""
    classes = np.unique(labels)
    noisy = labels.copy()
    if classes.size < 2 or ratio == 0:
        return noisy
    flip = rng.random(labels.size) < ratio
    pos = np.searchsorted(classes, labels[flip])
    shift = rng.integers(1, classes.size, size=pos.size)  # never 0: the new class differs
    noisy[flip] = classes[(pos + shift) % classes.size]
    return noisy


def apply_label_noise(split: LabeledSplit, noise: NoiseSpec) -> LabeledSplit:
    """Return ``split`` with noisy observed labels; its ``true_labels`` stay as they were."""
    if noise.kind == "none" or noise.ratio == 0:
        return split
    rng = np.random.default_rng(noise.seed)
    fn = per_class_noise if noise.kind == "per_class" else uniform_noise
    return split.with_labels(fn(split.true_labels, noise.ratio, rng))

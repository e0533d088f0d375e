"""P×K batch sampler for datasets whose classes may have fewer than K images (SOP: 2-12 per class).

pytorch-metric-learning's ``MPerClassSampler`` draws a class's K samples with ``safe_random_choice``, which
samples *with replacement* when the class has fewer than K images: with 2 images and K=4 it returns one image
four times (so no real positive pair) in 2/2⁴ = 1/8 of the draws. :class:`BalancedMPerClassSampler` keeps
PML's checks, epoch length and class draws, and only replaces that step: a small class contributes every one
of its images as evenly as possible (2 images, K=4 → each twice), a class with ≥ K images K distinct ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pytorch_metric_learning.samplers import MPerClassSampler
from pytorch_metric_learning.utils import common_functions as c_f

__all__ = ["BalancedMPerClassSampler", "balanced_choice"]


def balanced_choice(indices: np.ndarray, size: int, rng: np.random.RandomState) -> np.ndarray:
    """``size`` draws from ``indices``: without replacement if possible, else every index ⌊size/n⌋ or ⌈size/n⌉ times."""
    indices = np.asarray(indices)
    n = len(indices)
    if n >= size:
        return rng.choice(indices, size=size, replace=False)
    reps = -(-size // n)
    # Whole permutations, then a random subset of the last one: counts differ by at most one.
    tiled = np.concatenate([rng.permutation(indices) for _ in range(reps)])
    return rng.permutation(tiled[:size])


class BalancedMPerClassSampler(MPerClassSampler):
    """``MPerClassSampler`` (``batch_size`` required) whose small classes contribute all their images.

    Uses PML's global RNG (``numpy.random``), so seeding numpy seeds it, as for PML's sampler; each epoch
    depends only on that RNG's state, not on earlier epochs.
    """

    def __iter__(self) -> Iterator[int]:
        assert self.batch_size is not None, "BalancedMPerClassSampler needs batch_size"
        rng = c_f.NUMPY_RANDOM
        idx_list: list[int] = []
        classes_per_batch = self.batch_size // self.m_per_class
        # PML shuffles self.labels in place, so an epoch would depend on the previous one; starting from the
        # sorted classes makes it depend only on the RNG state (exact resume with a persistent loader).
        labels = sorted(self.labels)
        for _ in range(self.calculate_num_iters()):
            rng.shuffle(labels)
            for label in labels[:classes_per_batch]:
                idx_list.extend(int(i) for i in balanced_choice(self.labels_to_indices[label], self.m_per_class, rng))
        return iter(idx_list[: self.list_size])

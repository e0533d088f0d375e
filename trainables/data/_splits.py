"""Containers for a labelled split and a dataset's train/test pair."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainables.data.decoded_cache import DecodedImages

__all__ = ["LabeledSplit", "DatasetSplits", "IndexedDataset", "in_memory_split", "AffineView"]


@dataclass(frozen=True)
class LabeledSplit:
    """Samples of one split with their observed and true labels.

    Args:
        items: ``items[i]`` is what ``load_item`` turns into an input tensor (a tensor for in-memory data,
            a file path for image datasets).
        labels: observed labels (noisy for a noisy training split), ``int64``.
        true_labels: labels before noise injection (equal to ``labels`` for clean splits).
        load_item: turns one item into what the split's transform takes (a PIL image for image files and CIFAR-10's
            arrays); ``None`` when items already are tensors.
        paired: each item already holds its views, stacked on dim 0 (paired multi-modal data such as
            ``flows2d``: the views are the sample's modalities, not random augmentations). A multi-view loader uses
            them as they are; the loop also reports ``paired_mae``/``paired_cosine`` on such a test split.
        latent: for synthetic data, the variable each sample was generated from (``flows2d``: its z), saved with
            a paired test split's embeddings for plots.
        categories: each sample's category (a CSV dataset's ``category`` column, test queries only): the final
            epoch also reports Recall@1 and MAP@R per category (:mod:`trainables.metrics.categories`).
    """

    items: torch.Tensor | list
    labels: np.ndarray
    true_labels: np.ndarray
    load_item: Callable[[Any], Any] | None = None
    paired: bool = False
    latent: np.ndarray | None = None
    categories: np.ndarray | None = None

    def __post_init__(self) -> None:
        assert len(self.items) == len(self.labels) == len(self.true_labels)
        assert self.latent is None or len(self.latent) == len(self.labels)
        assert self.categories is None or len(self.categories) == len(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def noisy_mask(self) -> np.ndarray:
        """True where the observed label differs from the true label."""
        return self.labels != self.true_labels

    @property
    def num_classes(self) -> int:
        return int(np.unique(self.labels).size)

    def with_labels(self, labels: np.ndarray) -> LabeledSplit:
        return dataclasses.replace(self, labels=np.asarray(labels, dtype=np.int64))

    def subset(self, mask: np.ndarray) -> LabeledSplit:
        idx = np.flatnonzero(mask)
        items = (
            self.items[torch.as_tensor(idx)] if isinstance(self.items, torch.Tensor) else [self.items[i] for i in idx]
        )
        latent = None if self.latent is None else self.latent[idx]
        categories = None if self.categories is None else self.categories[idx]
        return dataclasses.replace(
            self,
            items=items,
            labels=self.labels[idx],
            true_labels=self.true_labels[idx],
            latent=latent,
            categories=categories,
        )


@dataclass(frozen=True)
class AffineView:
    """One random view of a small in-memory image: torchvision's ``RandomAffine`` (rotation in ±``degrees``, shift
    up to ``translate`` of the size, ``scale`` range), built on the first call.

    Lazily, because importing torchvision costs ~1.5 s: a single-view family's worker and the driver's spec
    checks, which load the dataset, never need it (benchmarks/driver_timeline.py)."""

    degrees: float
    translate: tuple[float, float]
    scale: tuple[float, float]

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return _random_affine(self)(image)


@functools.cache
def _random_affine(view: AffineView) -> Callable[[torch.Tensor], torch.Tensor]:
    from torchvision.transforms import v2

    return v2.RandomAffine(degrees=view.degrees, translate=view.translate, scale=view.scale)


def in_memory_split(images: torch.Tensor, labels: np.ndarray, mask: np.ndarray) -> LabeledSplit:
    """The samples of an embedded (in-memory) dataset selected by ``mask``, with clean labels."""
    idx = torch.as_tensor(np.flatnonzero(mask))
    return LabeledSplit(items=images[idx], labels=labels[mask], true_labels=labels[mask].copy())


@dataclass(frozen=True)
class DatasetSplits:
    """A dataset's class-disjoint training and test splits.

    Args:
        name: the spec's ``dataset.name``.
        train: the training split (label noise is applied to it only).
        test: the evaluation split; with ``gallery`` set, the queries.
        input_shape: shape of one transformed input, ``(C, H, W)``.
        gallery: In-Shop's gallery: test queries are retrieved against it instead of against each other.
        train_transform: random augmentation of a loaded training item (``None``: use it as loaded).
        eval_transform: deterministic transform for embedding any split (``None``: as loaded).
        view_transform: random augmentation making each view for the two-view (contrastive) families
            (``None``: ``train_transform``).
        on_device: applied to every batch once it is on the trial's device (``dataset.cache: decoded``: the
            transforms above yield uint8 and this normalises them there); ``None``: the batch is ready.
        views_on_device: ``on_device`` for the batches of ``view_transform`` (the cache's colour jitter runs there).
        image_cache: the node's decoded-image cache the splits read from, built before the loaders start.
    """

    name: str
    train: LabeledSplit
    test: LabeledSplit
    input_shape: tuple[int, ...]
    gallery: LabeledSplit | None = None
    train_transform: Callable[[Any], torch.Tensor] | None = None
    eval_transform: Callable[[Any], torch.Tensor] | None = None
    view_transform: Callable[[Any], torch.Tensor] | None = None
    on_device: Callable[[torch.Tensor], torch.Tensor] | None = None
    views_on_device: Callable[[torch.Tensor], torch.Tensor] | None = None
    image_cache: DecodedImages | None = None

    def with_train(self, train: LabeledSplit) -> DatasetSplits:
        return dataclasses.replace(self, train=train)


class IndexedDataset(Dataset):
    """Yields ``(input, label, index)``; with ``num_views > 1`` the input is a stack of augmented views."""

    def __init__(
        self,
        split: LabeledSplit,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        num_views: int = 1,
    ) -> None:
        self.split = split
        self.transform = transform
        self.num_views = num_views
        self.labels = torch.as_tensor(split.labels, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        item = self.split.items[index]
        x = self.split.load_item(item) if self.split.load_item is not None else item
        if self.num_views > 1 and self.split.paired:  # the item holds its views (modalities) already
            assert len(x) == self.num_views, f"a paired item holds {len(x)} views, the loader wants {self.num_views}"
        elif self.num_views > 1:
            assert self.transform is not None, "multi-view training needs a random transform"
            x = torch.stack([self.transform(x) for _ in range(self.num_views)])
        elif self.transform is not None:
            x = self.transform(x)
        return x, self.labels[index], index

"""Helpers shared by the on-disk loaders: layout errors, annotation parsing, class-disjoint splits, images.

Every loader describes its official layout once (:class:`Layout`); every problem with a root becomes one
:class:`~trainables.schema.errors.DataError` line naming the dataset, the path tried, the expected layout and where the
dataset is published and the ``python -m study.data fetch`` command that puts it there. Loaders never download.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainables.data._splits import DatasetSplits, LabeledSplit
from trainables.data.decoded_cache import DecodedImages, default_cache_dir
from trainables.data.image_file import BoxedImageFile, ImageFile
from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from trainables.schema.spec import DatasetSpec

__all__ = [
    "Layout",
    "first_half_classes",
    "image_splits",
    "parse_int",
    "read_mat",
    "read_rows",
    "split_by_mask",
]


@dataclass(frozen=True)
class Layout:
    """A dataset's official on-disk layout, for finding its root and for error messages.

    Args:
        dataset: the spec's ``dataset.name``.
        expected: the layout in one line, e.g. ``CUB_200_2011/{images/, images.txt, ...}``.
        url: where the dataset is published (``python -m study.data fetch`` downloads it; trials never do).
        markers: files/directories that must exist directly in the resolved root.
        subdirs: standard names of the extracted folder, tried below ``dataset.root`` when the root itself
            does not hold the markers (so both ``data/`` and ``data/CUB_200_2011`` work).
        fetchable: ``python -m study.data fetch <dataset>`` knows it (In-Shop: prints the manual steps), so the
            error names that command.
    """

    dataset: str
    expected: str
    url: str
    markers: tuple[str, ...]
    subdirs: tuple[str, ...] = ()
    fetchable: bool = True

    def error(self, problem: str, path: object) -> DataError:
        return DataError(
            f"dataset {self.dataset!r}: {problem}: {path}; expected layout {self.expected} "
            f"(published at {self.url}; {self._how_to_get()})"
        )

    def _how_to_get(self) -> str:
        if not self.fetchable:
            return "nothing is downloaded at run time"
        return (
            f"get it with: python -m study.data fetch {self.dataset} --root DIR, then set dataset.root: DIR; "
            "nothing is downloaded at run time"
        )

    def user_root(self, spec: DatasetSpec) -> Path:
        """``spec.root`` as an existing directory (a user's tree: no markers to look for)."""
        if spec.root is None:
            raise self.error("dataset.root is not set", "null")
        root = Path(spec.root).expanduser()
        if not root.is_dir():
            raise self.error("no such directory", root)
        return root

    def find_root(self, spec: DatasetSpec) -> Path:
        """The directory holding every marker: ``spec.root`` itself or one of :attr:`subdirs` below it."""
        if spec.root is None:
            raise self.error("dataset.root is not set", "null")
        root = Path(spec.root).expanduser()
        for candidate in (root, *(root / s for s in self.subdirs)):
            if all((candidate / m).exists() for m in self.markers):
                return candidate
        if not root.is_dir():
            raise self.error("no such directory", root)
        missing = [m for m in self.markers if not (root / m).exists()]
        raise self.error(f"missing {', '.join(missing)}", root)

    def require(self, path: Path) -> Path:
        if not path.exists():
            raise self.error("missing", path)
        return path


def read_rows(layout: Layout, path: Path, ncols: int, skip: int = 0) -> list[list[str]]:
    """Whitespace-separated rows of an annotation file (after ``skip`` header lines), each ``ncols`` wide."""
    layout.require(path)
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines()[skip:], start=skip + 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != ncols:
            raise layout.error(f"line {lineno} has {len(parts)} fields instead of {ncols}", path)
        rows.append(parts)
    if not rows:
        raise layout.error("no entries", path)
    return rows


def parse_int(layout: Layout, path: Path, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise layout.error(f"expected an integer, got {value!r}", path) from None


def first_half_classes(layout: Layout, labels: np.ndarray, where: object) -> np.ndarray:
    """Mask of samples whose class is in the first half of the sorted classes (SPEC "Data" split).

    CUB 1-100 / 101-200, CARS 1-98 / 99-196, Flowers 1-51 / 52-102; an odd count gives train the extra one.
    """
    classes = np.unique(labels)
    if classes.size < 2:
        raise layout.error(f"found {classes.size} class(es), need at least 2 for a class-disjoint split", where)
    return np.isin(labels, classes[: (classes.size + 1) // 2])


def split_by_mask(
    items: list[str], labels: np.ndarray, mask: np.ndarray, load_item: Callable[[object], object]
) -> LabeledSplit:
    idx = np.flatnonzero(mask)
    chosen = labels[idx].astype(np.int64)
    return LabeledSplit(items=[items[i] for i in idx], labels=chosen, true_labels=chosen.copy(), load_item=load_item)


def _masked_splits(
    items: list[str],
    labels: np.ndarray,
    masks: dict[str, np.ndarray | None],
    load: Callable[[object], object],
    layout: Layout,
    root: Path,
) -> dict[str, LabeledSplit | None]:
    """Each named split of ``masks`` (``None`` stays ``None``); an empty split, or one whose first file is missing,
    is the layout's error."""
    splits: dict[str, LabeledSplit | None] = {}
    for name, mask in masks.items():
        if mask is None:
            splits[name] = None
            continue
        if not mask.any():
            raise layout.error(f"the {name} split is empty", root)
        split = split_by_mask(items, labels, mask, load)
        layout.require(root / str(split.items[0]))
        splits[name] = split
    return splits


def image_splits(
    spec: DatasetSpec,
    layout: Layout,
    root: Path,
    items: list[str],
    labels: np.ndarray,
    train_mask: np.ndarray,
    test_mask: np.ndarray | None = None,
    gallery_mask: np.ndarray | None = None,
    boxes: dict[str, tuple[float, float, float, float]] | None = None,
) -> DatasetSplits:
    """Assemble an image dataset's splits (files relative to ``root``) with the spec's transforms; ``boxes``
    (item → x_1, y_1, x_2, y_2 in pixels) crops those images before the transforms.

    The first file of each split must exist, so a root with annotations but no extracted images fails here,
    on the driver, rather than inside every trial.
    """
    from trainables.data.transforms import eval_transform, image_sizes, train_transform, view_transform

    resize, crop = image_sizes(spec)
    masks = {"train": train_mask, "test": ~train_mask if test_mask is None else test_mask, "gallery": gallery_mask}
    # Boxed images (csv with x_1..y_2) are decoded at full scale and cropped per item: they skip the decoded cache.
    cache = None if boxes else _decoded_cache(spec, root, items, masks.values(), resize)
    load = BoxedImageFile(root, boxes) if boxes else ImageFile(root, resize) if cache is None else cache
    splits = _masked_splits(items, labels, masks, load, layout, root)
    common: dict[str, Any] = dict(
        name=spec.name,
        train=splits["train"],
        test=splits["test"],
        gallery=splits["gallery"],
        input_shape=(3, crop, crop),
    )
    if cache is not None:
        from trainables.data.cached_transforms import (
            CachedCenterCrop,
            CachedTrainCrop,
            CachedView,
            DeviceColorJitter,
            DeviceNormalize,
        )

        return DatasetSplits(
            **common,
            train_transform=CachedTrainCrop(crop, padding=crop // 8 if resize <= crop else None),
            eval_transform=CachedCenterCrop(crop),
            view_transform=CachedView(crop),
            on_device=DeviceNormalize(),
            views_on_device=DeviceNormalize(jitter=DeviceColorJitter()),
            image_cache=cache,
        )
    return DatasetSplits(
        **common,
        train_transform=train_transform(resize, crop),
        eval_transform=eval_transform(resize, crop),
        view_transform=view_transform(crop),
    )


def _decoded_cache(
    spec: DatasetSpec, root: Path, items: list[str], masks: Iterable[np.ndarray | None], resize: int
) -> DecodedImages | None:
    """The handle of the node's decoded cache of every image some split uses (``dataset.cache: decoded``); built
    lazily, by the first trial that trains, never by the driver's checks."""
    if spec.cache != "decoded":
        return None

    used = np.zeros(len(items), dtype=bool)
    for mask in masks:
        if mask is not None:
            used |= mask
    directory = Path(spec.cache_dir) if spec.cache_dir else default_cache_dir()
    chosen = tuple(items[i] for i in np.flatnonzero(used))
    return DecodedImages(dataset=spec.name, root=str(root), items=chosen, resize=resize, directory=str(directory))


def read_mat(layout: Layout, path: Path, key: str) -> np.ndarray:
    """Variable ``key`` of a MATLAB file (squeezed), or a layout error naming the file."""
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    layout.require(path)
    try:
        return np.atleast_1d(loadmat(path, squeeze_me=True)[key])
    except (MatReadError, KeyError, ValueError, TypeError, OSError) as e:
        raise layout.error(f"cannot read {key!r} ({type(e).__name__}: {e})", path) from None

"""Label noise injected into training labels (test labels are never touched).

- ``per_class`` (BSPML protocol, https://arxiv.org/abs/2212.01848 Sec. 5): in every class, ``round(ratio·N^c)``
  samples are moved to other classes chosen so that every class receives some.
- ``uniform`` (noise paper, "embedding losses under label noise" Sec. 3; PRISM's "symmetric" noise): each label
  flips with probability ``ratio`` to a uniformly chosen other class.
- ``small_cluster`` (PRISM, Liu et al., CVPR 2021, https://arxiv.org/abs/2103.16047 Sec. 5.1): ``round(ratio·C)``
  classes are dissolved; each one's samples are cut into small clusters and every cluster joins one randomly
  chosen surviving class — :func:`small_cluster_noise`.
- ``file``: a published noisy-label list (PRISM's ``datalist/*noised_train.csv``, or ``<path> <label>`` lines)
  mapped onto the dataset's training samples by path — :func:`read_noisy_list`, :func:`map_noisy_list`.

The noisy mask is ``split.labels != split.true_labels`` (true labels: the dataset's own annotation).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from trainables.data._splits import LabeledSplit
    from trainables.schema.spec import NoiseSpec

__all__ = [
    "apply_label_noise",
    "per_class_noise",
    "uniform_noise",
    "small_cluster_noise",
    "read_noisy_list",
    "map_noisy_list",
    "sample_paths",
    "clean_list_of",
    "MEAN_CLUSTER_SIZE",
]

#: Mean size of a small cluster, measured on PRISM's published lists (CUB 0.25/0.5: 2.31/2.30, CARS 0.25: 2.27
#: samples per (true class, noisy label) group; ``datalist/*smallclusternoised_train.csv``).
MEAN_CLUSTER_SIZE = 2.3


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


def small_cluster_noise(
    labels: np.ndarray, ratio: float, rng: np.random.Generator, mean_cluster_size: float = MEAN_CLUSTER_SIZE
) -> np.ndarray:
    """PRISM's small-cluster noise: dissolve ``round(ratio·C)`` classes into small clusters, each given to a
    randomly chosen surviving class (distinct for one class' clusters while there are enough survivors).

    Followed from PRISM (https://arxiv.org/abs/2103.16047 Sec. 5.1) and checked against its published lists
    (github.com/alibaba-edu/Ranking-based-Instance-Selection, ``datalist/CUB_0.25smallclusternoised_train.csv``
    vs ``CUB_train.csv``): 25 of CUB's 100 training classes (50 at 0.5; 25 of CARS' 98 at 0.25) lose all their
    samples, no surviving class loses any, every dissolved class is spread over ~26 target classes in groups of
    1-10+ samples (mean 2.3, 50-58 % singletons), and every surviving class receives some. The lists do not say
    how a class' samples were grouped (the paper clusters them by appearance); with labels only, a class'
    shuffled samples are cut into runs of geometric length with mean ``mean_cluster_size``, which reproduces the
    lists' size distribution (of the groups of one true class under one noisy label). Surviving classes keep their ids (PRISM renumbers them 0..C'-1; ids are arbitrary).
    """
    classes = np.unique(labels)
    noisy = labels.copy()
    n_dissolved = int(np.floor(ratio * classes.size + 0.5))
    if n_dissolved == 0:
        return noisy
    if n_dissolved >= classes.size:
        raise ValueError(f"small_cluster noise needs a surviving class, but got {ratio=} of {classes.size} classes")
    dissolved = rng.choice(classes, size=n_dissolved, replace=False)
    survivors = np.setdiff1d(classes, dissolved)
    p = 1.0 / mean_cluster_size
    for c in np.sort(dissolved):
        members = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.cumsum(rng.geometric(p, size=members.size))  # run ends; at most one run per member
        clusters = np.split(members, cuts[cuts < members.size])
        # One class' clusters go to distinct classes while there are enough (as in the lists, ~26 targets per class).
        targets = rng.permutation(survivors)
        for j, cluster in enumerate(clusters):
            noisy[cluster] = targets[j % targets.size]
    return noisy


def sample_paths(split: LabeledSplit, dataset: str) -> list[str]:
    """The path a noisy-label list names each sample of ``split`` by.

    Image datasets: the item's path relative to the dataset root (CUB: ``images/001.Black_footed_Albatross/
    x.jpg``). In-memory datasets (digits, glyphs) have no files: sample ``i`` of the split is ``<dataset>/<i>``
    (``glyphs/0`` … ``glyphs/1535``, in the split's order).
    """
    if isinstance(split.items, torch.Tensor):
        return [f"{dataset}/{i}" for i in range(len(split))]
    return [str(item).replace("\\", "/") for item in split.items]


def read_noisy_list(path: str | Path) -> list[tuple[str, int]]:
    """``(path, label)`` rows of a noisy-label list: PRISM's CSV (``<path>,<label>`` per line, no header) or
    ``<path> <label>`` lines (the label is the last field, so a path may contain spaces, as PRISM's CARS ones do).
    Blank lines and lines starting with ``#`` are skipped. Raises a one-line ``DataError``."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"dataset.noise.file: cannot read noisy-label list {path} ({e.strerror})") from None
    rows: list[tuple[str, int]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(",", 1) if "," in line else re.split(r"\s+(?=\S+$)", line)
        if len(parts) != 2 or not parts[0].strip():
            raise DataError(f"dataset.noise.file {path} line {lineno}: expected '<path>,<label>' or '<path> <label>'")
        try:
            rows.append((parts[0].strip(), int(parts[1])))
        except ValueError:
            raise DataError(f"dataset.noise.file {path} line {lineno}: label {parts[1]!r} is not an integer") from None
    if not rows:
        raise DataError(f"dataset.noise.file {path}: no entries")
    return rows


def _match(entry: str, index: dict[str, int]) -> int | None:
    """The sample whose path is ``entry`` or a suffix of it at a ``/`` (``/data/CUB_200_2011/images/a/b.jpg``
    names CUB's ``images/a/b.jpg``)."""
    parts = entry.replace("\\", "/").lstrip("./").split("/")
    for start in range(len(parts)):
        hit = index.get("/".join(parts[start:]))
        if hit is not None:
            return hit
    return None


def map_noisy_list(
    rows: list[tuple[str, int]],
    paths: list[str],
    true_labels: np.ndarray,
    source: str,
    anchors: list[tuple[str, int]] | None = None,
) -> np.ndarray:
    """The observed label of each sample (in ``paths`` order) from a list's ``rows``, in the dataset's label ids.

    Every row must name one training sample and every training sample must be named once; otherwise one
    ``DataError`` line names the first offending path. A list may number its labels its own way (PRISM's
    small-cluster lists use 0..C'-1): each list label is mapped to the dataset class it shares most samples with,
    greedily by overlap and one-to-one; a list label left without a class (PRISM's symmetric CUB lists use a
    101st label) gets a fresh id, so its samples count as noisy. The mapping renames labels only, so training is
    unchanged; it makes the noisy mask (observed ≠ true) mean what the list's authors meant. ``anchors``: rows of
    a list of the samples known clean (PRISM's ``*_cleaned_train.csv``); the overlap is then counted on them only,
    which settles datasets of tiny classes (SOP), where a moved cluster can outnumber a class' own samples.
    """
    index = {p.lstrip("./"): i for i, p in enumerate(paths)}
    listed = np.full(len(paths), -1, dtype=np.int64)
    raw = np.empty(len(paths), dtype=np.int64)
    for entry, label in rows:
        i = _match(entry, index)
        if i is None:
            raise DataError(
                f"dataset.noise.file {source}: path {entry!r} matches no training sample of the dataset "
                f"(e.g. {paths[0]!r})"
            )
        if listed[i] >= 0:
            raise DataError(f"dataset.noise.file {source}: sample {paths[i]!r} is listed twice (again as {entry!r})")
        listed[i], raw[i] = 1, label
    missing = np.flatnonzero(listed < 0)
    if missing.size:
        raise DataError(
            f"dataset.noise.file {source}: lists {len(rows)} of the {len(paths)} training samples; "
            f"first one missing: {paths[missing[0]]!r}"
        )
    list_ids, list_of = np.unique(raw, return_inverse=True)
    classes, class_of = np.unique(true_labels, return_inverse=True)
    counted = np.ones(len(paths), dtype=bool)
    if anchors is not None:
        counted[:] = False
        for entry, _ in anchors:
            i = _match(entry, index)
            if i is not None:
                counted[i] = True
    overlap = np.zeros((list_ids.size, classes.size), dtype=np.int64)
    np.add.at(overlap, (list_of[counted], class_of[counted]), 1)
    mapped = np.full(list_ids.size, -1, dtype=np.int64)
    taken = np.zeros(classes.size, dtype=bool)
    li, ci = np.nonzero(overlap)
    for k in np.lexsort((ci, li, -overlap[li, ci])):  # largest overlap first; ties by ids (deterministic)
        if mapped[li[k]] < 0 and not taken[ci[k]]:
            mapped[li[k]], taken[ci[k]] = classes[ci[k]], True
    fresh = np.flatnonzero(mapped < 0)
    mapped[fresh] = int(classes.max()) + 1 + np.arange(fresh.size)
    return mapped[list_of]


def clean_list_of(path: str | Path) -> Path | None:
    """PRISM's clean-sample list beside a noisy one (``X_0.25smallclusternoised_train.csv`` →
    ``X_0.25smallclusternoised_cleaned_train.csv``; ``find_clean_dataset`` of its ``base_dataset.py``), if it exists."""
    path = Path(path)
    head, sep, _ = path.name.partition("noised_")
    clean = path.with_name(f"{head}noised_cleaned_train.csv") if sep else None
    return clean if clean is not None and clean.is_file() and clean != path else None


def apply_label_noise(split: LabeledSplit, noise: NoiseSpec, dataset: str = "") -> LabeledSplit:
    """Return ``split`` with noisy observed labels; its ``true_labels`` stay as they were.

    ``dataset`` names the samples of an in-memory dataset for ``kind: file`` (:func:`sample_paths`).
    """
    if noise.kind == "file":
        assert noise.file is not None  # the spec requires it
        rows = read_noisy_list(noise.file)
        clean = clean_list_of(noise.file)
        anchors = read_noisy_list(clean) if clean is not None else None
        paths = sample_paths(split, dataset)
        return split.with_labels(map_noisy_list(rows, paths, split.true_labels, noise.file, anchors))
    if noise.kind == "none" or noise.ratio == 0:
        return split
    rng = np.random.default_rng(noise.seed)
    fn = {"per_class": per_class_noise, "uniform": uniform_noise, "small_cluster": small_cluster_noise}[noise.kind]
    return split.with_labels(fn(split.true_labels, noise.ratio, rng))

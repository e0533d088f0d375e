"""``glyphs``: an embedded, procedurally generated many-class image set for zero-shot DML on a CPU.

Why it exists: the other embedded dataset, scikit-learn's digits (classes 0-4 train, 5-9 test), cannot show
what this platform measures. On it label noise *raises* the multi-similarity loss' test Recall@1 (0.839 at
noise 0 → 0.897 at 0.3), and its 5 training classes are too few for class-disjoint validation folds. Glyphs
has many classes, a class-disjoint split like the DML benchmarks (CUB, CARS, SOP), and a difficulty at which
noisy labels hurt, while one training run still takes seconds on one CPU core.

How it is made (numpy only, one fixed seed, so every process and machine builds the same arrays):

- **Classes.** Each class is a prototype glyph: ``strokes_per_class`` random quadratic Bézier strokes whose
  control points lie in the unit square (a stroke may start where the previous one ended, so glyphs have
  connected, letter-like structure).
- **Samples.** Each sample redraws its class' prototype with per-sample variation: Gaussian jitter of every
  control point (``jitter``), a random affine map (rotation, anisotropic scale, shear, translation), a
  random stroke half-width, and, after rendering, a random contrast and additive Gaussian pixel noise.
- **Rendering.** Every stroke is a polyline of ``segments`` pieces; a pixel's intensity is
  ``clip(half_width + 0.5 - d, 0, 1)`` with ``d`` its distance (in pixels) to the nearest piece (a box-filter
  anti-aliasing), the strokes are combined by a maximum, and the image is quantised to 8 bits like a real
  image (which also hides last-ulp differences between math libraries).
- **Split.** Classes ``0 .. train_classes - 1`` train, the next ``test_classes`` test (zero-shot: no test class
  is seen in training): 128 training classes, enough for 4 class-disjoint validation folds of P classes each.
- **Difficulty.** Few samples per training class (12) on purpose: with 48 per class, 6-12 epochs of ``ms``
  overfit the training classes and label noise acted as a regulariser again (test Recall@1 *rose* with noise,
  as on digits); with 12, the network memorises the wrong labels and Recall@1 falls with the noise ratio
  (``benchmarks/glyphs_noise.py``).

The whole set is built once per process (``functools.cache``, well under a second).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.data._splits import AffineView, DatasetSplits, in_memory_split

if TYPE_CHECKING:
    from trainables.schema.spec import DatasetSpec

__all__ = ["GlyphsConfig", "DEFAULT_CONFIG", "make_glyphs", "load_glyphs_splits", "view_transform"]


@dataclass(frozen=True)
class GlyphsConfig:
    """Generator parameters (hashable: :func:`make_glyphs` caches one build per config)."""

    train_classes: int = 128  # classes 0 .. train_classes - 1 train, the next test_classes test
    test_classes: int = 64
    train_samples: int = 12  # samples per training class (few: noisy labels get memorised, see above)
    test_samples: int = 16  # samples per test class
    image_size: int = 16
    strokes_per_class: int = 3
    segments: int = 8  # polyline pieces per Bézier stroke
    connect_prob: float = 0.5  # chance that a stroke starts where the previous one ended
    jitter: float = 0.06  # std of the per-sample control-point jitter (unit-square coordinates)
    rotation_deg: float = 12.0  # uniform in ±rotation_deg
    scale: tuple[float, float] = (0.85, 1.1)
    shear: float = 0.15  # uniform in ±shear
    translate: float = 0.08  # uniform in ±translate (fraction of the image side)
    half_width: tuple[float, float] = (0.5, 1.1)  # stroke half-width in pixels
    contrast: tuple[float, float] = (0.6, 1.0)
    pixel_noise: float = 0.08  # std of the additive Gaussian pixel noise
    seed: int = 20240601


DEFAULT_CONFIG = GlyphsConfig()


def _bezier_polylines(ctrl: np.ndarray, segments: int) -> np.ndarray:
    """Quadratic Bézier curves ``ctrl`` (..., 3, 2) sampled at ``segments + 1`` points → (..., segments + 1, 2)."""
    t = np.linspace(0.0, 1.0, segments + 1, dtype=np.float64)[:, None]
    p0, p1, p2 = ctrl[..., 0:1, :], ctrl[..., 1:2, :], ctrl[..., 2:3, :]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2


def _prototypes(cfg: GlyphsConfig, rng: np.random.Generator) -> np.ndarray:
    """Control points of every class' strokes: (num_classes, strokes, 3, 2) in the unit square."""
    num_classes = cfg.train_classes + cfg.test_classes
    ctrl = rng.uniform(0.12, 0.88, size=(num_classes, cfg.strokes_per_class, 3, 2))
    connect = rng.random((num_classes, cfg.strokes_per_class)) < cfg.connect_prob
    for s in range(1, cfg.strokes_per_class):
        ctrl[connect[:, s], s, 0] = ctrl[connect[:, s], s - 1, 2]
    return ctrl


def _affine(cfg: GlyphsConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random per-sample affine maps about the image centre: matrices (n, 2, 2) and offsets (n, 2)."""
    theta = np.deg2rad(rng.uniform(-cfg.rotation_deg, cfg.rotation_deg, n))
    sx, sy = rng.uniform(*cfg.scale, n), rng.uniform(*cfg.scale, n)
    sh = rng.uniform(-cfg.shear, cfg.shear, n)
    cos, sin = np.cos(theta), np.sin(theta)
    rot = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)
    shear_scale = np.zeros((n, 2, 2))
    shear_scale[:, 0, 0], shear_scale[:, 0, 1], shear_scale[:, 1, 1] = sx, sh * sy, sy
    shift = rng.uniform(-cfg.translate, cfg.translate, (n, 2))
    return rot @ shear_scale, shift


def _render(points: np.ndarray, half_width: np.ndarray, size: int) -> np.ndarray:
    """Anti-aliased polylines → images. ``points`` (n, strokes, segments + 1, 2) in pixel units; (n, size, size)."""
    n = points.shape[0]
    a = points[:, :, :-1].reshape(n, -1, 2).astype(np.float32)  # segment starts (n, S, 2)
    ab = points[:, :, 1:].reshape(n, -1, 2).astype(np.float32) - a
    inv_len2 = 1.0 / np.maximum((ab * ab).sum(-1), np.float32(1e-12))  # (n, S)
    centres = np.arange(size, dtype=np.float32) + np.float32(0.5)
    gx = np.tile(centres, size)[None, :]  # pixel centres, row-major (1, H·W)
    gy = np.repeat(centres, size)[None, :]
    d2 = np.full((n, size * size), np.inf, dtype=np.float32)  # squared distance to the nearest segment
    for s in range(a.shape[1]):
        px, py = gx - a[:, s, 0:1], gy - a[:, s, 1:2]
        bx, by = ab[:, s, 0:1], ab[:, s, 1:2]
        t = np.clip((px * bx + py * by) * inv_len2[:, s : s + 1], 0.0, 1.0)
        px -= t * bx
        py -= t * by
        np.minimum(d2, px * px + py * py, out=d2)
    images = np.clip(half_width[:, None] + np.float32(0.5) - np.sqrt(d2), 0.0, 1.0)
    return images.reshape(n, size, size)


@functools.cache
def make_glyphs(cfg: GlyphsConfig = DEFAULT_CONFIG) -> tuple[torch.Tensor, np.ndarray]:
    """All images (N, 1, size, size) float32 in [0, 1] (8-bit levels) and their labels (N,) int64, class-major."""
    rng = np.random.default_rng(cfg.seed)
    protos = _prototypes(cfg, rng)
    counts = [cfg.train_samples] * cfg.train_classes + [cfg.test_samples] * cfg.test_classes
    labels = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    n = labels.size
    ctrl = protos[labels] + rng.normal(0.0, cfg.jitter, size=(n, *protos.shape[1:]))
    matrix, shift = _affine(cfg, n, rng)
    centred = _bezier_polylines(ctrl, cfg.segments) - 0.5  # (n, strokes, segs+1, 2)
    warped = np.einsum("nij,nspj->nspi", matrix, centred) + 0.5 + shift[:, None, None, :]
    half_width = rng.uniform(*cfg.half_width, n).astype(np.float32)
    images = _render(warped * cfg.image_size, half_width, cfg.image_size)
    images *= rng.uniform(*cfg.contrast, n).astype(np.float32)[:, None, None]
    images += rng.normal(0.0, cfg.pixel_noise, size=images.shape).astype(np.float32)
    images = np.round(np.clip(images, 0.0, 1.0) * 255.0) / 255.0
    return torch.from_numpy(images.astype(np.float32)).unsqueeze(1), labels


def load_glyphs_splits(spec: DatasetSpec) -> DatasetSplits:
    """The first half of the glyph classes train, the second half test (class-disjoint, zero-shot)."""
    del spec  # no root: the data is generated
    cfg = DEFAULT_CONFIG
    images, labels = make_glyphs(cfg)
    is_train = labels < cfg.train_classes

    return DatasetSplits(
        name="glyphs",
        train=in_memory_split(images, labels, is_train),
        test=in_memory_split(images, labels, ~is_train),
        input_shape=(1, cfg.image_size, cfg.image_size),
        view_transform=view_transform(),
    )


def view_transform() -> AffineView:
    """One random view of a glyph for the two-view families: a small rotation, shift and scale (no flip: a
    mirrored glyph may look like another class). Single-view families train on the glyphs as they are."""
    return AffineView(degrees=12, translate=(0.1, 0.1), scale=(0.85, 1.15))

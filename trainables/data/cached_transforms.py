"""The transforms of a ``dataset.cache: decoded`` split: crops and flips on the stored uint8 pixels in the loader,
the float conversion and ImageNet normalisation batched on the trial's device (:class:`DeviceNormalize`).

Hand-written rather than torchvision's ``RandomCrop``/``RandomHorizontalFlip`` on a tensor because those would need a
writable tensor copy of the whole resized image per sample; numpy slicing of the read-only mapping copies only the crop.
They draw from torch's global generator with exactly the calls torchvision makes (``torch.randint(0, h - crop + 1,
size=())`` for the top, then the left, only when that side is larger than the crop; ``torch.rand(1) >= 0.5`` to skip
the flip), so under the same seed a cached crop is the very crop of the PIL pipeline (tests/trainables/test_cache.py).
The loader ships uint8 (a quarter of float32's bytes over the bus, pinned and non-blocking on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CachedTrainCrop", "CachedCenterCrop", "CachedView", "DeviceNormalize"]


def _chw(hwc: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)))


@dataclass(frozen=True)
class CachedTrainCrop:
    """``train_transform``'s random ``crop``² (after zero padding by ``padding``) and horizontal flip, as uint8 CHW."""

    crop: int
    padding: int | None = None

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        if self.padding:
            p = self.padding
            image = np.pad(image, ((p, p), (p, p), (0, 0)))
        h, w = image.shape[:2]
        c = self.crop
        if h < c or w < c:
            raise ValueError(f"Required crop size {(c, c)} is larger than input image size {(h, w)}.")
        top = int(torch.randint(0, h - c + 1, size=())) if h > c else 0
        left = int(torch.randint(0, w - c + 1, size=())) if w > c else 0
        out = image[top : top + c, left : left + c]
        if not torch.rand(1) >= 0.5:
            out = out[:, ::-1]
        return _chw(out)


@dataclass(frozen=True)
class CachedCenterCrop:
    """``eval_transform``'s center ``crop``² (torchvision's anchor rounding; zero padding if the image is smaller)."""

    crop: int

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        h, w = image.shape[:2]
        c = self.crop
        if h < c or w < c:
            from torchvision.transforms.v2 import functional as F

            return F.center_crop(_chw(image), [c, c])
        top, left = int(round((h - c) / 2.0)), int(round((w - c) / 2.0))
        return _chw(image[top : top + c, left : left + c])


@dataclass(frozen=True)
class CachedView:
    """``view_transform`` without its normalisation, on a uint8 tensor of the stored image: the same random resized
    crop (scale 0.2-1), flip, colour jitter and grayscale rules, drawn per sample in the loader.

    The crop is taken from the stored image (shorter side ``resize``) rather than from the decoded original, so a
    small crop is upsampled from fewer pixels; its box is drawn with the same rule relative to the image."""

    crop: int

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        return _view_pipeline(self.crop)(_chw(image))


_VIEWS: dict[int, object] = {}


def _view_pipeline(crop: int):  # type: ignore[no-untyped-def]
    if crop not in _VIEWS:
        from torchvision.transforms import v2

        from trainables.data.transforms import view_transform

        _VIEWS[crop] = v2.Compose([t for t in view_transform(crop).transforms if not _is_normalisation(t)])
    return _VIEWS[crop]


def _is_normalisation(t: object) -> bool:
    from torchvision.transforms import v2

    return isinstance(t, (v2.ToImage, v2.ToDtype, v2.Normalize, v2.ToPureTensor))


@dataclass(frozen=True)
class DeviceNormalize:
    """uint8 batch → float32 in [0, 1] → ImageNet-normalised: the ``ToDtype(scale=True)`` and ``Normalize`` kernels
    of the PIL pipeline, run once per batch on whatever device the batch is on (a float batch passes unchanged)."""

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.dtype != torch.uint8:
            return batch
        from torchvision.transforms.v2 import functional as F

        from trainables.data.transforms import IMAGENET_MEAN, IMAGENET_STD

        x = F.to_dtype(batch, torch.float32, scale=True)
        return F.normalize(x, list(IMAGENET_MEAN), list(IMAGENET_STD), inplace=True)

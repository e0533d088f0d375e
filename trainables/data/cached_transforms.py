"""The transforms of a ``dataset.cache: decoded`` split: crops and flips on the stored uint8 pixels in the loader,
the float conversion and ImageNet normalisation batched on the trial's device (:class:`DeviceNormalize`).

Hand-written rather than torchvision's ``RandomCrop``/``RandomHorizontalFlip`` on a tensor because those would need a
writable tensor copy of the whole resized image per sample; numpy slicing of the read-only mapping copies only the crop.
They draw from torch's global generator with exactly the calls torchvision makes (``torch.randint(0, h - crop + 1,
size=())`` for the top, then the left, only when that side is larger than the crop; ``torch.rand(1) >= 0.5`` to skip
the flip), so under the same seed a cached crop is the very crop of the PIL pipeline
(tests/trainables/data/test_cache.py).
The loader ships uint8 (a quarter of float32's bytes over the bus, pinned and non-blocking on CUDA).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CachedTrainCrop", "CachedCenterCrop", "CachedView", "DeviceColorJitter", "DeviceNormalize"]


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
    """``view_transform``'s geometry on a uint8 tensor of the stored image: the same random resized crop (scale
    0.2-1, torchvision's box rule) and flip, drawn per sample in the loader; its colour jitter, grayscale and
    normalisation run on the device (``DeviceNormalize(jitter=DeviceColorJitter())``).

    The crop is taken from the stored image (shorter side ``resize``) rather than from the decoded original, so a
    small crop is upsampled from fewer pixels; its box is drawn with the same rule relative to the image."""

    crop: int

    def __call__(self, image: np.ndarray) -> torch.Tensor:
        return _view_pipeline(self.crop)(_chw(image))


_VIEWS: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}


def _view_pipeline(crop: int) -> Callable[[torch.Tensor], torch.Tensor]:
    if crop not in _VIEWS:
        from torchvision.transforms import v2

        from trainables.data.transforms import view_transform

        _VIEWS[crop] = v2.Compose([t for t in view_transform(crop).transforms if not _is_normalisation(t)])
    return _VIEWS[crop]


def _is_normalisation(t: object) -> bool:
    """The steps that run on the device: dtype conversion, normalisation, colour jitter and grayscale."""
    from torchvision.transforms import v2

    return isinstance(t, (v2.ToImage, v2.ToDtype, v2.Normalize, v2.ToPureTensor, v2.RandomApply, v2.RandomGrayscale))


@dataclass(frozen=True)
class DeviceNormalize:
    """uint8 batch → float32 in [0, 1] → ImageNet-normalised: the ``ToDtype(scale=True)`` and ``Normalize`` kernels
    of the PIL pipeline, run once per batch on whatever device the batch is on (a float batch passes unchanged)."""

    #: The two-view families' colour distortion, drawn per sample before the normalisation (training views only).
    jitter: DeviceColorJitter | None = None

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.dtype != torch.uint8:
            return batch
        from torchvision.transforms.v2 import functional as F

        from trainables.data.transforms import IMAGENET_MEAN, IMAGENET_STD

        x = F.to_dtype(batch, torch.float32, scale=True)
        if self.jitter is not None:
            x = self.jitter(x)
        return F.normalize(x, list(IMAGENET_MEAN), list(IMAGENET_STD), inplace=True)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma of a float (N, 3, H, W) batch, (N, 1, H, W): torchvision's ``rgb_to_grayscale`` weights."""
    r, g, b = x.unbind(dim=1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1)


def _blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    r = ratio.view(-1, 1, 1, 1)
    return (x * r + other * (1.0 - r)).clamp_(0.0, 1.0)


def _shift_hue(x: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    from torchvision.transforms.v2.functional._color import _hsv_to_rgb, _rgb_to_hsv

    hsv = _rgb_to_hsv(x)
    h, s, v = hsv.unbind(dim=1)
    h = (h + hue.view(-1, 1, 1)).remainder_(1.0)
    return _hsv_to_rgb(torch.stack((h, s, v), dim=1))


@dataclass(frozen=True)
class JitterParams:
    """Per-sample draws of :class:`DeviceColorJitter`: which samples are jittered, each op's factor, the order of
    the four ops (``order[i]`` lists op ids 0 brightness, 1 contrast, 2 saturation, 3 hue), and which turn gray."""

    jitter: torch.Tensor
    factors: torch.Tensor  # (N, 4): brightness, contrast, saturation factors; hue shift
    order: torch.Tensor  # (N, 4)
    gray: torch.Tensor


@dataclass(frozen=True)
class DeviceColorJitter:
    """The two-view families' colour distortion (``view_transform``: ``RandomApply(ColorJitter(0.4, 0.4, 0.4, 0.1),
    p=0.8)``, then ``RandomGrayscale(p=0.2)``) on a float [0, 1] batch, each sample with its own draws.

    torchvision's ``ColorJitter`` draws one set of factors and one op order per call, so on a batch it would jitter
    every image alike; here every sample draws its own (uniform factors in [1 - 0.4, 1 + 0.4] and [-0.1, 0.1], a
    uniformly random op order, as ``ColorJitter`` draws per image) and each op is applied to the samples whose turn
    it is, with torchvision's float formulas (blend and clamp; hue through HSV)."""

    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    p: float = 0.8
    gray_p: float = 0.2

    def sample(self, n: int, device: torch.device) -> JitterParams:
        u = torch.rand(n, 4, device=device)
        spread = torch.tensor([self.brightness, self.contrast, self.saturation, self.hue], device=device)
        centre = torch.tensor([1.0, 1.0, 1.0, 0.0], device=device)
        return JitterParams(
            jitter=torch.rand(n, device=device) < self.p,
            factors=centre + (2 * u - 1) * spread,
            order=torch.rand(n, 4, device=device).argsort(dim=1),
            gray=torch.rand(n, device=device) < self.gray_p,
        )

    def apply(self, x: torch.Tensor, prm: JitterParams) -> torch.Tensor:
        for step in range(4):
            op = prm.order[:, step]
            for k in range(4):
                chosen = (prm.jitter & (op == k)).view(-1, 1, 1, 1)
                if not bool(chosen.any()):
                    continue
                f = prm.factors[:, k]
                if k == 0:
                    y = _blend(x, torch.zeros_like(x), f)
                elif k == 1:
                    y = _blend(x, _gray(x).mean(dim=(1, 2, 3), keepdim=True).expand_as(x), f)
                elif k == 2:
                    y = _blend(x, _gray(x).expand_as(x), f)
                else:
                    y = _shift_hue(x, f)
                x = torch.where(chosen, y, x)
        return torch.where(prm.gray.view(-1, 1, 1, 1), _gray(x).expand_as(x), x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply(x, self.sample(len(x), x.device))

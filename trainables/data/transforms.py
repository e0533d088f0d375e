"""Image transforms (SPEC "Data"): train resize → random crop → horizontal flip → ImageNet normalisation;
eval resize → center crop → normalisation.

The defaults are the DML benchmarks' 256 → 224 (e.g. MS loss, https://arxiv.org/abs/1904.06627 Sec. 5.1);
``dataset.image_size`` / ``dataset.resize_size`` change them for small backbones or quick runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torchvision.transforms import v2

if TYPE_CHECKING:
    from trainables.schema.spec import DatasetSpec

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "image_sizes", "train_transform", "eval_transform", "view_transform"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: (resize, crop) of the DML benchmarks.
DEFAULT_SIZES = (256, 224)


def image_sizes(spec: DatasetSpec, default: tuple[int, int] = DEFAULT_SIZES) -> tuple[int, int]:
    """``(resize, crop)``: the spec's sizes, else ``default``; a lone crop size keeps the 256/224 ratio."""
    crop = spec.image_size or default[1]
    if spec.resize_size is not None:
        return spec.resize_size, crop
    if spec.image_size is None:
        return default
    return max(crop, round(crop * default[0] / default[1])), crop


def _to_normalized_tensor() -> list[v2.Transform]:
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        v2.ToPureTensor(),
    ]


def train_transform(resize: int, crop: int) -> v2.Compose:
    """Resize the shorter side to ``resize``, random ``crop``², random horizontal flip, normalise.

    When the image is not larger than the crop (CIFAR-10's 32²), the crop pads by ``crop // 8`` first, the
    standard CIFAR augmentation; otherwise a random crop of a same-size image would do nothing.
    """
    padding = crop // 8 if resize <= crop else None
    return v2.Compose(
        [v2.Resize(resize), v2.RandomCrop(crop, padding=padding), v2.RandomHorizontalFlip(), *_to_normalized_tensor()]
    )


def eval_transform(resize: int, crop: int) -> v2.Compose:
    """Resize the shorter side to ``resize``, center ``crop``², normalise."""
    return v2.Compose([v2.Resize(resize), v2.CenterCrop(crop), *_to_normalized_tensor()])


def view_transform(crop: int) -> v2.Compose:
    """One random view for the two-view contrastive families (SimCLR's augmentation, Chen et al. 2020 App. A,
    as in the debiased-contrastive thesis' CIFAR-10 experiment): random resized crop (scale 0.2-1), flip,
    colour jitter (p 0.8), grayscale (p 0.2), normalise. Much stronger than ``train_transform`` on purpose:
    the two views are the only positives these losses see."""
    return v2.Compose(
        [
            v2.RandomResizedCrop(crop, scale=(0.2, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            v2.RandomGrayscale(p=0.2),
            *_to_normalized_tensor(),
        ]
    )

"""Embedding networks: a backbone, a linear embedding head, L2-normalised output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from study.spec import ModelSpec

__all__ = ["BACKBONE_NAMES", "EmbeddingNet", "SmallConvNet", "build_model"]


class SmallConvNet(nn.Module):
    """Three conv blocks and global average pooling; for the 8×8 digits on a CPU."""

    out_features = 128

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *block(in_channels, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, self.out_features),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class EmbeddingNet(nn.Module):
    """``normalize(head(backbone(x)))``: cosine similarity is a dot product of its outputs."""

    def __init__(self, backbone: nn.Module, feature_dim: int, embedding_dim: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.head(self.backbone(x)), dim=-1)


def _small_cnn(spec: ModelSpec, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    net = SmallConvNet(in_channels=input_shape[0])
    return net, net.out_features


_BACKBONES = {"small_cnn": _small_cnn}
BACKBONE_NAMES: tuple[str, ...] = tuple(_BACKBONES)


def build_model(spec: ModelSpec, input_shape: tuple[int, ...]) -> EmbeddingNet:
    backbone, feature_dim = _BACKBONES[spec.backbone](spec, input_shape)
    return EmbeddingNet(backbone, feature_dim, spec.embedding_dim)

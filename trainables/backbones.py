"""The names a spec may use for a backbone, without importing torch.

A spec error (a typo, a bad ``--set``) must come back in a fraction of a second, so the driver checks
``model.backbone`` against this module (the dataset names are the catalogue's, :mod:`trainables.datasets`);
:mod:`trainables.models` (which imports torch) takes its name lists from here, and ``tests/study/test_fast_errors.py``
checks that its builder table matches.
"""

from __future__ import annotations

__all__ = ["BACKBONE_NAMES", "PRETRAINABLE"]

#: Backbones with ImageNet weights (``model.pretrained: true``): torchvision's.
PRETRAINABLE: tuple[str, ...] = ("resnet18", "resnet34", "resnet50", "googlenet")
BACKBONE_NAMES: tuple[str, ...] = ("small_cnn", "paired_mlp", *PRETRAINABLE)

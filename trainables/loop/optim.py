"""The optimiser ``train.optimizer`` names and the learning-rate schedule ``train.lr_schedule`` applies to it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from trainables.schema.spec import LrScheduleSpec, StudySpec

__all__ = ["build_optimizer", "build_lr_schedule", "LrFactor"]


def build_optimizer(spec: StudySpec, params: list[dict[str, Any]]) -> torch.optim.Optimizer:
    opt = spec.train.optimizer
    if opt.name == "sgd":
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
    cls = torch.optim.Adam if opt.name == "adam" else torch.optim.AdamW
    return cls(params, lr=opt.lr, weight_decay=opt.weight_decay)


@dataclass(frozen=True)
class LrFactor:
    """The factor ``train.lr_schedule`` applies to every group's lr after ``epoch`` epochs (a picklable callable
    for ``LambdaLR``)."""

    schedule: LrScheduleSpec
    epochs: int

    def __call__(self, epoch: int) -> float:
        s = self.schedule
        if s.type == "step":
            return float(s.gamma ** sum(epoch >= m for m in s.milestones))
        if s.type == "cosine":
            return s.min_factor + (1.0 - s.min_factor) * 0.5 * (
                1.0 + math.cos(math.pi * min(epoch, self.epochs) / self.epochs)
            )
        return 1.0


def build_lr_schedule(spec: StudySpec, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR | None:
    """The schedule stepped once per epoch, or ``None`` for ``type: none`` (the lr stays fixed)."""
    if spec.train.lr_schedule.type == "none":
        return None
    return torch.optim.lr_scheduler.LambdaLR(optimizer, LrFactor(spec.train.lr_schedule, spec.train.epochs))

"""``fifo``'s Ray scheduler: Ray's own ``FIFOScheduler`` (every trial to the end)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ray.tune.schedulers import FIFOScheduler

if TYPE_CHECKING:
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from trainables.schema.scheduler.fifo import FifoSpec

__all__ = ["build"]


def build(spec: FifoSpec, plan: StudyPlan, layout: StudyLayout) -> FIFOScheduler:
    """Ray's FIFO: no state, nothing per cell."""
    return FIFOScheduler()

"""``halving``'s Ray scheduler: synchronous successive halving per cell
(:class:`~study.search.halving.HalvingScheduler`: a rung waits for all its cell's trials), its rungs kept in the
study directory across resumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from study.search.halving import HalvingRule, HalvingScheduler

if TYPE_CHECKING:
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from trainables.schema.scheduler.halving import HalvingSpec

__all__ = ["build"]


def build(spec: HalvingSpec, plan: StudyPlan, layout: StudyLayout) -> HalvingScheduler:
    """Every cell of ``plan`` waits for its budget (``trials_per_cell``) at its first rung."""
    s = plan.base.search
    rule = HalvingRule(
        plan.trials_per_cell,
        s.objective,
        s.mode,
        plan.base.train.epochs,
        spec.first_rung,
        spec.reduction_factor,
        spec.hedge,
    )
    return HalvingScheduler([(c.label, c.fixed) for c in plan.cells], rule, layout.scheduler_state)

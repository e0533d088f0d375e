"""``asha``'s Ray scheduler: one ASHA rung set per cell (:class:`~study.search.cell_asha.CellASHA`: a trial is
compared with its own cell's trials only), its rungs kept in the study directory across resumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from study.search.cell_asha import CellASHA, Rungs

if TYPE_CHECKING:
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from trainables.schema.scheduler.asha import AshaSpec

__all__ = ["build"]


def build(spec: AshaSpec, plan: StudyPlan, layout: StudyLayout) -> CellASHA:
    """Every cell of ``plan`` with the same grace period, η and ``max_t`` (``train.epochs``)."""
    s = plan.base.search
    rungs = Rungs(s.objective, s.mode, plan.base.train.epochs, spec.grace_period, spec.reduction_factor)
    return CellASHA([(c.label, c.fixed) for c in plan.cells], rungs, layout.scheduler_state)

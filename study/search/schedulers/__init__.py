"""Each scheduler kind's Ray half: name → the module of that name here, imported when a run builds its scheduler.

A kind's spec (its keys, share, lag, checkpoint epochs, check and description) is torch- and Ray-free, in its module
of :mod:`trainables.schema.scheduler`; its module here holds ``build(spec, plan, layout)``, which returns the Ray
scheduler of a run (per cell, with its state in the study directory where it keeps one). Ray pickles what it returns:
the classes stay where they are (:class:`~study.search.cell_asha.CellASHA`,
:class:`~study.search.halving.HalvingScheduler`), and a builder only constructs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ray.tune.schedulers import TrialScheduler

    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan

__all__ = ["Builder", "builder", "build_scheduler"]


class Builder(Protocol):
    """A kind's ``build``: its spec (the kind's class), the run's plan and directory → the run's Ray scheduler."""

    def __call__(self, spec: Any, plan: StudyPlan, layout: StudyLayout, /) -> TrialScheduler: ...


def builder(kind: str) -> Builder:
    """The ``build`` of scheduler kind ``kind``, from the module of that name here (imported on first use: a run
    imports only its own kind's Ray classes)."""
    found: Builder = importlib.import_module(f"{__name__}.{kind}").build
    return found


def build_scheduler(plan: StudyPlan, layout: StudyLayout) -> TrialScheduler:
    """The run's Ray scheduler: its ``search.scheduler`` kind's (:func:`builder`)."""
    spec = plan.base.search.scheduler
    return builder(spec.type)(spec, plan, layout)

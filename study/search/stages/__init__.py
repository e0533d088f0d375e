"""The stages of a run, in run order, each one kind over :class:`~study.search.stages.base.Stage`: the search
(:mod:`~study.search.stages.search`), the finalist race (:mod:`~study.search.stages.race`) and the final test stage
(:mod:`~study.search.stages.final`), then, with ``search.replicates: {min, max}``, the later rounds of replicates
(:mod:`~study.search.stages.rounds`). A new stage is one module here plus one line in :data:`STAGES`.

The face of the package: the driver, the bill and ``--status`` read :data:`STAGES` and :func:`stages_of`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from study.search.stages.base import Stage, StageResult, StageRun
from study.search.stages.final import FinalStage
from study.search.stages.race import RaceStage
from study.search.stages.rounds import RoundsStage
from study.search.stages.search import SearchStage

if TYPE_CHECKING:
    from study.intake.plan import StudyPlan

__all__ = ["STAGES", "Stage", "StageResult", "StageRun", "stages_of"]

#: Every stage kind, in run order.
STAGES: tuple[Stage, ...] = (SearchStage(), RaceStage(), FinalStage(), RoundsStage())


def stages_of(plan: StudyPlan) -> list[Stage]:
    """The stages ``plan`` runs, in run order."""
    return [stage for stage in STAGES if stage.runs_in(plan)]

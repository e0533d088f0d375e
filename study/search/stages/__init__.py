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

__all__ = ["STAGES", "Stage", "StageResult", "StageRun", "stages_of", "counted_stages"]

#: The stages of one round of a run, in run order: what a plan without rounds of replicates runs.
_ROUND: tuple[Stage, ...] = (SearchStage(), RaceStage(), FinalStage())

#: Every stage kind, in run order: the later rounds repeat the first round's stages.
STAGES: tuple[Stage, ...] = (*_ROUND, RoundsStage(_ROUND))


def stages_of(plan: StudyPlan) -> list[Stage]:
    """The stages ``plan`` runs, in run order."""
    return [stage for stage in STAGES if stage.runs_in(plan)]


def counted_stages(plan: StudyPlan) -> list[Stage]:
    """The stages after the search that ``plan`` runs and that tag the runs they plan as they start: those
    ``--status`` counts and the bill prices after the search, in run order."""
    return [stage for stage in stages_of(plan) if stage.planned_tag is not None]

"""The base every stage of a run is one kind of (:class:`Stage`), what a stage runs in (:class:`StageRun`) and the one
result every stage hands on (:class:`StageResult`, Ray's ``ResultGrid`` idea: one type whatever the stage).

Lifecycle of a stage, who calls what and when:

1. Planning (``--plan``, the bill, ``--status``): :meth:`Stage.runs_in` says whether a plan runs the stage at all and
   :meth:`Stage.planned` how many runs it trains. Nothing is started; both read the plan only.
2. Running (:func:`study.search.driver.run_study`): the driver takes the plan's stages in run order
   (:func:`study.search.stages.stages_of`) and calls :meth:`Stage.run` on each with what the stage before it left
   (``None`` for the first). A stage checks for a stop before it writes anything, tags the parent run with its
   :attr:`Stage.tag`, runs its points in its own Ray experiment (:attr:`Stage.experiment`, restored when a driver
   resumes: the same earlier results give the same points) and returns a :class:`StageResult`.
3. Ending: the driver goes on to the next stage only while the result :attr:`~StageResult.goes_on`; a stage a stop
   ended returns where it stands in its outcome's ``progress``, which is the driver's one exit for a stop (exit 3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from study.intake.plan import StudyPlan
    from study.search.context import StudyContext
    from study.search.outcome import SearchResults, StudyOutcome
    from study.tracking.store import TrackingStore

__all__ = ["Stage", "StageRun", "StageResult"]


@dataclass(frozen=True)
class StageRun:
    """What every stage runs in: the run's context, its tracking store and the parent run it logs under."""

    context: StudyContext
    store: TrackingStore
    parent: str


@dataclass(frozen=True)
class StageResult:
    """What the stages so far produced: the run's outcome as they leave it, and the search's results, which each
    later stage reads (with the trials an earlier stage chose for the final stage, :attr:`SearchResults.chosen`)."""

    outcome: StudyOutcome
    search: SearchResults

    @property
    def goes_on(self) -> bool:
        """Whether a later stage may start: the stages so far finished and some search trial succeeded."""
        return self.outcome.succeeded


class Stage(ABC):
    """One stage of a run, in a Ray experiment of its own (see the module's lifecycle).

    A kind sets its class attributes and the three methods; a new kind is one module plus one line in
    :data:`study.search.stages.STAGES`.
    """

    #: Its name: the parent run's ``stage`` tag while it runs (:data:`trainables.schema.record.STAGE`), the
    #: trials' stage tag, and its column and phrase in ``--status``.
    tag: ClassVar[str]
    #: Its Ray experiment's folder in the study directory.
    experiment: ClassVar[str]
    #: The parent run's tag holding the runs it planned as it started (``None``: the plan's count stands).
    planned_tag: ClassVar[str | None] = None
    #: What it does, in ``--status``'s stage line (``final (retraining the best configurations: 12 runs planned)``).
    doing: ClassVar[str] = ""
    #: What its runs are called in ``--status``'s count line of a one-cell run (``<tag>: 1 of 4 <runs_noun> finished``).
    runs_noun: ClassVar[str] = "runs"
    #: Its column in ``--status``'s row per cell (``final seeds``: runs finished / per cell); ``None``: no column.
    column: ClassVar[str | None] = None
    #: Whether its runs are search trials to the end (validation only, priced as search trials in the bill).
    searches: ClassVar[bool] = False
    #: What ``--status`` and the selection line call the trial it chose (:meth:`chosen`); empty: it chooses nothing.
    winner_name: ClassVar[str] = ""

    def per_cell(self, plan: StudyPlan) -> int:
        """The runs it trains per cell of ``plan``, as ``--status``'s row shows them (0 where it does not run)."""
        return 0

    def bill_text(self, plan: StudyPlan) -> str:
        """What the size line says of it before the final stage's runs (ending in ``then ``); empty for a stage it
        does not name."""
        return ""

    def chosen(self, plan: StudyPlan, parent_file: Callable[[str], str | None]) -> dict[str, tuple[int, float]]:
        """Per cell label, the trial this stage chose for the final stage to retrain instead of the search's best (its
        Optuna number and the score it was chosen on), read from the parent run's files (``parent_file(path)``: the
        text, ``None`` when absent) once the stage ended; empty for a stage that chooses nothing, or before."""
        return {}

    @abstractmethod
    def runs_in(self, plan: StudyPlan) -> bool:
        """Whether ``plan`` runs this stage at all (its spec asks for it)."""

    @abstractmethod
    def planned(self, plan: StudyPlan) -> int:
        """The runs this stage trains for ``plan``, as the bill counts them (0 where it does not run)."""

    @abstractmethod
    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        """Run (or resume) the stage after the stages before it (``before``: what they left; ``None`` for the first)
        and return the run's outcome as this stage leaves it. A stage a stop ended leaves its ``progress`` set."""

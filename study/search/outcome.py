"""What a study's stages produced: :class:`StudyOutcome` (what :func:`study.search.driver.run_study` returns),
:class:`StageProgress` (where a stage that did not finish stands), :class:`SearchResults` (the search experiment's
results, its search trials apart from the final trials a table's cells started in it), and the search's summary by
the final stage's rule (:func:`summarize`). Apart from the driver so that a reader of the outcome (the report, the
command line) does not read the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from study.final.stage import FinalGroup, best_per_cell, result_trial_id, results_of
from study.tracking.callback import error_line
from trainables.schema.trial import FINAL_KEY, sampled_values

if TYPE_CHECKING:
    from ray.tune import Result, ResultGrid

    from study.runtime.stop_callback import StageLedger
    from trainables.schema.spec import StudySpec

__all__ = ["StageProgress", "StudyOutcome", "SearchResults", "config_of", "summarize", "failures_of"]


@dataclass(frozen=True)
class StageProgress:
    """Where a stage that did not finish stands (Tune's statuses when its loop ended: :class:`StageLedger`).

    Args:
        stage: the stage's tag (:attr:`study.search.stages.base.Stage.tag`).
        planned: the trials the stage is to run.
        trials: the trials that exist.
        failed: those that ended in ERROR.
        unfinished: those a stop left RUNNING, PENDING or PAUSED (``--resume`` continues them).
    """

    stage: str
    planned: int
    trials: int
    failed: int
    unfinished: int

    @classmethod
    def of(cls, ledger: StageLedger, stage: str, planned: int) -> StageProgress:
        failed = sum(status == "ERROR" for status in ledger.statuses.values())
        return cls(stage, planned, len(ledger.statuses), failed, ledger.unfinished())


@dataclass(frozen=True)
class StudyOutcome:
    """What a finished (or interrupted) study produced."""

    num_trials: int
    num_failed: int
    best_trial_id: str | None
    best_value: float | None
    best_params: dict[str, Any]
    parent_run_id: str
    #: The stage did not finish: a trial had not ended (RUNNING, PENDING, PAUSED: a stop signal ended Tune's loop),
    #: or fewer trials than planned exist. ``--resume`` continues it.
    interrupted: bool
    wall_time_s: float
    #: The final test stage's groups (empty when it was skipped or did not run).
    final: list[FinalGroup] = field(default_factory=list)
    #: The study's MLflow experiment.
    experiment_id: str = ""
    #: ``(trial_id, the line naming its exception)`` of every failed trial, search and final stage.
    failures: list[tuple[str, str]] = field(default_factory=list)
    #: Where the stage that did not finish stands (``None`` when none was interrupted).
    progress: StageProgress | None = None
    #: Each search cell's winner, ``(trial id, value)`` by cell label (:func:`study.final.stage.best_per_cell`): a
    #: replicated study's replicates, a table's cells; ``best_trial_id`` is the study's own cell's (replicate 0's).
    cell_bests: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: What the stages after the search report, in their order (the report prints them; a table's ``table.md`` too):
    #: a stage that retrains finalists says how each fared and which one each group retrains.
    stage_lines: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.num_trials - self.num_failed > 0 and not self.interrupted


@dataclass(frozen=True)
class SearchResults:
    """The search experiment's results, its search trials apart from the final trials a table's cells started in it
    (:class:`~study.search.cell_search.CellSearch`)."""

    trials: list[Result]
    finals: list[Result]
    #: Per group, the trial the final stage retrains when a stage before it chose it
    #: (:meth:`~study.search.stages.base.Stage.chosen`); ``None``: the search's best
    #: (:func:`study.final.stage.best_per_group`).
    chosen: dict[str, Result] | None = None

    @classmethod
    def of(cls, grid: ResultGrid) -> SearchResults:
        every = results_of(grid)
        return cls([r for r in every if FINAL_KEY not in config_of(r)], [r for r in every if FINAL_KEY in config_of(r)])


def config_of(result: Result) -> dict[str, Any]:
    return result.config or {}


def summarize(
    spec: StudySpec, results: list[Result], order: dict[str, int], progress: StageProgress | None
) -> StudyOutcome:
    """The search stage's outcome (the parent run, wall time and experiment are the caller's to fill in);
    ``progress``: where it stands, ``None`` when it finished."""
    s = spec.search
    # The final stage's rule, per cell: trials that trained every epoch, best last value, ties to the earliest trial.
    cells = best_per_cell(spec, results, order)
    best = cells.get(spec.name)
    sampled = sampled_values(best.config or {}) if best is not None else {}
    return StudyOutcome(
        num_trials=len(results),
        num_failed=sum(r.error is not None for r in results),
        best_trial_id=result_trial_id(best) if best is not None else None,
        best_value=float((best.metrics or {})[s.objective]) if best is not None else None,
        best_params=sampled,
        parent_run_id="",
        interrupted=progress is not None,
        wall_time_s=0.0,
        failures=failures_of(results),
        progress=progress,
        cell_bests={label: (result_trial_id(r), float((r.metrics or {})[s.objective])) for label, r in cells.items()},
    )


def failures_of(results: ResultGrid | list[Result]) -> list[tuple[str, str]]:
    """``(trial_id, reason)`` of each failed trial: the line of its traceback naming the exception."""
    return [(result_trial_id(r), error_line(str(r.error))) for r in results_of(results) if r.error is not None]

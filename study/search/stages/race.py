"""The finalist race (``final.race``, :mod:`study.final.race`): each group's finalists retrained on the race seeds in
Ray's ``tune_race`` experiment, each group's winner picked by its mean, the standings logged to the parent run. The
final stage then retrains each group's winner instead of its search best."""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import TYPE_CHECKING

from study.final.race import Standing, race_csv, race_points, standing_lines, standings
from study.final.stage import ALL, result_trial_id, results_of, top_per_group
from study.runtime.stopping import check_stop, fit_window
from study.search.stages.base import Stage, StageResult, StageRun
from study.search.stages.final import final_group
from study.tracking.optuna_link import trial_numbers
from study.tracking.outage import unwrapped
from trainables.schema import record as R
from trainables.schema.trial import RACE_KEY, SPEC_KEY, sampled_values

if TYPE_CHECKING:
    from collections.abc import Callable

    from ray.tune import Result

    from study.intake.plan import StudyPlan
    from study.search.outcome import StudyOutcome
    from trainables.schema.spec import StudySpec

__all__ = ["RaceStage", "raced_outcome"]


class RaceStage(Stage):
    """The finalist race: runs where ``final.race`` is set and a final stage follows."""

    tag = R.STAGE_RACE
    experiment = R.RACE_EXPERIMENT
    planned_tag = R.RACE_PLANNED
    doing = "racing the finalists on more seeds"
    runs_noun = "finalist runs"
    column = "race"
    searches = True
    #: What ``--status`` and the selection line call the trial it chose (``race winner: …``).
    winner_name = "race winner"

    def runs_in(self, plan: StudyPlan) -> bool:
        return plan.base.final.race is not None and plan.base.final.seeds > 0

    def planned(self, plan: StudyPlan) -> int:
        return plan.race_runs

    def per_cell(self, plan: StudyPlan) -> int:
        return plan.race_per_cell

    def bill_text(self, plan: StudyPlan) -> str:
        race = plan.base.final.race
        if race is None:
            return ""
        return (
            f"a race of {race.finalists} finalists × {race.seeds} seeds per {plan.final_unit} = {plan.race_runs} race "
            "runs (validation only), then "
        )

    def chosen(self, plan: StudyPlan, parent_file: Callable[[str], str | None]) -> dict[str, tuple[int, float]]:
        """Each cell's race winner and its race score (the mean of its search value and its race runs' values) from
        the parent run's :data:`~trainables.schema.record.RACE_FILE` (written once the race ended). A study's groups
        (``final.group_by``) are no cells: their winners are left out."""
        text = parent_file(R.RACE_FILE) if self.runs_in(plan) else None
        if not text:
            return {}
        rows = list(csv.DictReader(io.StringIO(text)))
        groups = {row[R.GROUP] for row in rows}
        out = {}
        for row in rows:
            if row["winner"] != "true" or not row["optuna_number"]:
                continue
            group = row[R.GROUP]
            if not plan.groups_are_cells:  # a study of one cell: its race's one group
                if groups != {group} or len(plan.cells) != 1:
                    continue
                group = plan.cells[0].label
            out[group] = (int(row["optuna_number"]), float(row[R.RACE_MEAN]))
        return out

    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        """Resumable as the final stage is (a restored driver continues Ray's race experiment: the same search results
        give the same points). Adds its failed trials to the outcome's failures; a stop leaves where it stands."""
        from ray import tune  # defers Ray: the bill and --status read a stage's plan only

        from study.search.outcome import StageProgress, failures_of  # defers Ray, as above
        from study.search.trial_record import stage_callback, trial_spec_data  # defers Ray, as above
        from study.search.tuners import grid_tuner, stage_ledger  # defers Ray, as above

        assert before is not None, "the race follows the search"
        check_stop("after the search stage, before the race")
        context, store, parent = run.context, run.store, run.parent
        spec, race = context.spec, context.spec.final.race
        assert race is not None, "a race needs final.race"
        order = trial_numbers(context.layout.optuna_url, spec.name)
        finalists = top_per_group(spec, before.search.trials, order, race.finalists, final_group(context.plan))
        points = race_points(spec, finalists, order)
        store.set_tags(parent, {R.STAGE: self.tag, self.planned_tag: str(len(points))})
        callback = stage_callback(context, store, parent, stage=self.tag)
        param_space = {SPEC_KEY: trial_spec_data(spec), RACE_KEY: tune.grid_search(points)}
        # A grid of search trials, ranked by the search's objective on the validation classes.
        tuner = grid_tuner(context, self.experiment, param_space, callback, (spec.search.objective, len(points)))
        with fit_window():
            grid = unwrapped(tuner.fit)
        ledger = stage_ledger(tuner)
        before.outcome.failures.extend(failures_of(grid))
        if not ledger.finished(len(points)):
            progress = StageProgress.of(ledger, self.tag, len(points))
            return dataclasses.replace(
                before, outcome=dataclasses.replace(before.outcome, interrupted=True, progress=progress)
            )
        winners, table = standings(spec, finalists, results_of(grid), order)
        store.log_text(parent, race_csv(table), R.RACE_FILE)
        outcome = raced_outcome(spec, before.outcome, winners, table)
        return StageResult(outcome, dataclasses.replace(before.search, chosen=winners))


def raced_outcome(
    spec: StudySpec, outcome: StudyOutcome, winners: dict[str, Result], race: list[Standing]
) -> StudyOutcome:
    """The search's outcome with each group's race winner in place of its search best (``final.race``): the trial the
    console, ``--status`` and the parent run's ``best_trial_id`` and ``best_<objective>`` name is the one the final
    stage retrains. Its value stays its search value (the race's means are in its standings, ``race``, which the
    outcome's :attr:`~study.search.outcome.StudyOutcome.stage_lines` show)."""
    objective = spec.search.objective
    lines = [*outcome.stage_lines, *standing_lines(race, spec.name)]
    cell_bests = dict(outcome.cell_bests)
    for label, r in winners.items():
        if label in cell_bests:
            cell_bests[label] = (result_trial_id(r), float((r.metrics or {})[objective]))
    own = winners.get(spec.name) or winners.get(ALL)
    if own is None:
        return dataclasses.replace(outcome, cell_bests=cell_bests, stage_lines=lines)
    return dataclasses.replace(
        outcome,
        best_trial_id=result_trial_id(own),
        best_value=float((own.metrics or {})[objective]),
        best_params=sampled_values(own.config or {}),
        cell_bests=cell_bests,
        stage_lines=lines,
    )

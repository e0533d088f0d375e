"""The final test stage (:mod:`study.final.stage`): each group's best configuration (or the one an earlier stage
chose, :attr:`~study.search.outcome.SearchResults.chosen`) retrained on ``final.seeds`` seeds on all training classes
and evaluated on the test classes, in Ray's ``tune_final`` experiment; the summary is logged to the parent run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from study.final.stage import (
    FinalGroup,
    best_per_group,
    category_csv,
    final_points,
    point_key,
    results_of,
    summarize_final,
    summary_csv,
)
from study.runtime.stopping import check_stop, fit_window
from study.search.stages.base import Stage, StageResult, StageRun
from study.tracking.optuna_link import trial_numbers
from study.tracking.outage import unwrapped
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH, final_metric
from trainables.schema.trial import FINAL_KEY, SPEC_KEY

if TYPE_CHECKING:
    from ray.tune import Result

    from study.intake.plan import StudyPlan
    from study.search.outcome import StageProgress

__all__ = ["FinalStage", "final_group"]


class FinalStage(Stage):
    """The final test stage: runs where ``final.seeds`` > 0, after every stage that chooses."""

    tag = R.STAGE_FINAL
    experiment = R.FINAL_EXPERIMENT
    planned_tag = R.FINAL_PLANNED
    doing = "retraining the best configurations"
    runs_noun = "final runs"
    column = "final seeds"

    def runs_in(self, plan: StudyPlan) -> bool:
        return plan.base.final.seeds > 0

    def planned(self, plan: StudyPlan) -> int:
        return plan.final_runs

    def per_cell(self, plan: StudyPlan) -> int:
        return plan.base.final.seeds

    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        """The final points the search's experiment already ran (a table's cells start theirs as their search ends,
        :class:`~study.search.cell_search.CellSearch`) are read back by their points; a final Tuner runs the rest.
        Resumable: a restored driver continues Ray's final experiment, whose points are the same (the search's
        results are). Adds the failed final trials to the outcome's failures."""
        assert before is not None, "the final stage follows the search"
        check_stop("after the search stage, before the final stage")
        groups, progress = self._groups(run, before)
        outcome = dataclasses.replace(before.outcome, final=groups, interrupted=progress is not None, progress=progress)
        return StageResult(outcome, before.search)

    def _groups(self, run: StageRun, before: StageResult) -> tuple[list[FinalGroup], StageProgress | None]:
        """The groups and, when the stage did not finish, where it stands (``None`` when it did)."""
        from study.search.outcome import StageProgress, config_of, failures_of  # defers Ray: see SearchStage.run

        context, store, parent = run.context, run.store, run.parent
        spec, search, failures = context.spec, before.search, before.outcome.failures
        order = trial_numbers(context.layout.optuna_url, spec.name)
        best = search.chosen
        if best is None:
            best = best_per_group(spec, search.trials, order, final_group(context.plan))
        points = final_points(spec, best)
        if not points:
            return [], None
        store.set_tags(parent, {R.STAGE: self.tag, self.planned_tag: str(len(points))})
        ran = {point_key(config_of(r)[FINAL_KEY]): r for r in search.finals}
        done = [ran[key] for key in map(point_key, points) if key in ran]
        rest = [p for p in points if point_key(p) not in ran]
        failures.extend(failures_of(done))
        results: list[Result] = []
        if rest:
            results, progress = self._tuner(run, rest, failures)
            if progress is not None:
                return [], progress
        results = done + results
        groups = summarize_final(spec, results, best)
        # Every final trial trains every epoch (no scheduler): it ended by Tune's status and by its last epoch.
        trained = sum(r.error is not None or int((r.metrics or {}).get(EPOCH, 0)) >= spec.train.epochs for r in results)
        if trained < len(points):  # stopped: some seeds are missing, so there is no summary yet (--resume writes it)
            failed = sum(r.error is not None for r in results)
            return [], StageProgress(self.tag, len(points), len(results), failed, len(points) - trained)
        if len(groups) == 1:  # one group: its summary is the study's result, on the parent run itself
            store.end_parent_metrics(parent, {k: v for k, v in groups[0].summary().items() if v == v})
        store.log_text(parent, summary_csv(groups), R.FINAL_SUMMARY_FILE)
        if (per_category := category_csv(groups)) is not None:
            store.log_text(parent, per_category, R.FINAL_CATEGORY_FILE)
        return groups, None

    def _tuner(
        self, run: StageRun, points: list[dict[str, Any]], failures: list[tuple[str, str]]
    ) -> tuple[list[Result], StageProgress | None]:
        """The final points the search did not run, in the final stage's own Tuner (a grid over them); its results
        and, when it did not finish, where it stands."""
        from ray import tune  # defers Ray: the bill and --status read a stage's plan only

        from study.search.outcome import StageProgress, failures_of  # defers Ray, as above
        from study.search.trial_record import stage_callback, trial_spec_data  # defers Ray, as above
        from study.search.tuners import grid_tuner, stage_ledger  # defers Ray, as above

        context = run.context
        callback = stage_callback(context, run.store, run.parent, stage=self.tag)
        param_space = {SPEC_KEY: trial_spec_data(context.spec), FINAL_KEY: tune.grid_search(points)}
        metric = final_metric(context.spec.search.metric)  # the live view shows the test metric
        tuner = grid_tuner(context, self.experiment, param_space, callback, (metric, len(points)))
        with fit_window():
            grid = unwrapped(tuner.fit)
        ledger = stage_ledger(tuner)
        failures.extend(failures_of(grid))
        if not ledger.finished(len(points)):
            return [], StageProgress.of(ledger, self.tag, len(points))
        return results_of(grid), None


def final_group(plan: StudyPlan) -> Callable[[dict[str, Any]], str | None] | None:
    """The final stage's group of a search trial's config: its cell (a table, replicates), else ``final.group_by``'s."""
    return plan.group if plan.groups_are_cells else None

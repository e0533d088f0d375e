"""The stages after the search, each in a Tuner of its own: the finalist race (``final.race``,
:mod:`study.final.race`) and the final test stage (:mod:`study.final.stage`). Each resumes as the search does (a
restored driver continues the stage's Ray experiment: the same search results give the same points) and says where it
stands when a stop ended it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from study.final.race import Standing, race_csv, race_points, standings
from study.final.stage import (
    FinalGroup,
    best_per_group,
    category_csv,
    final_points,
    point_key,
    results_of,
    summarize_final,
    summary_csv,
    top_per_group,
)
from study.intake.plan import StudyPlan
from study.runtime.stopping import fit_window
from study.search.context import StudyContext
from study.search.outcome import SearchResults, StageProgress, config_of, failures_of
from study.search.trial_record import stage_callback, trial_spec_data
from study.search.tuners import final_tuner, race_tuner, stage_ledger
from study.tracking.optuna_link import trial_numbers
from study.tracking.outage import unwrapped
from study.tracking.store import TrackingStore
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH
from trainables.schema.trial import FINAL_KEY, RACE_KEY, SPEC_KEY

if TYPE_CHECKING:
    from ray.tune import Result

__all__ = ["run_race_stage", "run_final_stage"]


def run_final_stage(
    context: StudyContext, store: TrackingStore, parent: str, search: SearchResults, failures: list[tuple[str, str]]
) -> tuple[list[FinalGroup], StageProgress | None]:
    """Retrain each group's best configuration with ``final.seeds`` seeds on all training classes, evaluate on the
    test classes, and log the summary to the parent run. The points the search's experiment already ran (a table's
    cells start theirs as their search ends, :class:`~study.search.cell_search.CellSearch`) are read back by their
    points; a final Tuner runs the rest. Resumable: a restored driver continues Ray's final experiment, whose points
    are the same (the search's results are). Returns the groups and, when the stage did not finish, where it stands
    (``None`` when it did); adds the failed final trials to ``failures``. A group the finalist race decided
    (``search.raced``) retrains its race winner instead of the search's best."""
    spec, layout, plan = context.spec, context.layout, context.plan
    order = trial_numbers(layout.optuna_url, spec.name)
    best = search.raced if search.raced is not None else best_per_group(spec, search.trials, order, _final_group(plan))
    points = final_points(spec, best)
    if not points:
        return [], None
    store.set_tags(parent, {R.STAGE: R.STAGE_FINAL, R.FINAL_PLANNED: str(len(points))})
    ran = {point_key(config_of(r)[FINAL_KEY]): r for r in search.finals}
    done = [ran[key] for key in map(point_key, points) if key in ran]
    rest = [p for p in points if point_key(p) not in ran]
    failures.extend(failures_of(done))
    results: list[Result] = []
    if rest:
        results, progress = _final_tuner_stage(context, store, parent, rest, failures)
        if progress is not None:
            return [], progress
    results = done + results
    groups = summarize_final(spec, results, best)
    # Every final trial trains every epoch (no scheduler): it ended by Tune's status and by its last epoch.
    trained = sum(r.error is not None or int((r.metrics or {}).get(EPOCH, 0)) >= spec.train.epochs for r in results)
    if trained < len(points):  # stopped: some seeds are missing, so there is no summary yet (--resume writes it)
        failed = sum(r.error is not None for r in results)
        return [], StageProgress(R.STAGE_FINAL, len(points), len(results), failed, len(points) - trained)
    if len(groups) == 1:  # one group: its summary is the study's result, on the parent run itself
        store.end_parent_metrics(parent, {k: v for k, v in groups[0].summary().items() if v == v})
    store.log_text(parent, summary_csv(groups), R.FINAL_SUMMARY_FILE)
    if (per_category := category_csv(groups)) is not None:
        store.log_text(parent, per_category, R.FINAL_CATEGORY_FILE)
    return groups, None


def _final_group(plan: StudyPlan) -> Callable[[dict[str, Any]], str | None] | None:
    """The final stage's group of a search trial's config: its cell (a table, replicates), else ``final.group_by``'s."""
    return plan.group if plan.groups_are_cells else None


def run_race_stage(
    context: StudyContext, store: TrackingStore, parent: str, search: SearchResults, failures: list[tuple[str, str]]
) -> tuple[dict[str, Result], list[Standing], StageProgress | None]:
    """The finalist race (``final.race``, :mod:`study.final.race`): each group's finalists retrained on the race seeds
    in the race's own Tuner, each group's winner picked by its mean, the standings logged to the parent run. Resumable
    as the final stage is (a restored driver continues Ray's race experiment: the same search results give the same
    points). Returns the winners and the standings, or where the race stands when it did not finish; adds its failed
    trials to ``failures``."""
    from ray import tune

    spec, layout = context.spec, context.layout
    race = spec.final.race
    assert race is not None, "a race needs final.race"
    order = trial_numbers(layout.optuna_url, spec.name)
    finalists = top_per_group(spec, search.trials, order, race.finalists, _final_group(context.plan))
    points = race_points(spec, finalists, order)
    store.set_tags(parent, {R.STAGE: R.STAGE_RACE, R.RACE_PLANNED: str(len(points))})
    callback = stage_callback(context, store, parent, stage=R.STAGE_RACE)
    tuner = race_tuner(
        context, {SPEC_KEY: trial_spec_data(spec), RACE_KEY: tune.grid_search(points)}, callback, len(points)
    )
    with fit_window():
        grid = unwrapped(tuner.fit)
    ledger = stage_ledger(tuner)
    failures.extend(failures_of(grid))
    if not ledger.finished(len(points)):
        return {}, [], StageProgress.of(ledger, R.STAGE_RACE, len(points))
    winners, table = standings(spec, finalists, results_of(grid), order)
    store.log_text(parent, race_csv(table), R.RACE_FILE)
    return winners, table, None


def _final_tuner_stage(
    context: StudyContext,
    store: TrackingStore,
    parent: str,
    points: list[dict[str, Any]],
    failures: list[tuple[str, str]],
) -> tuple[list[Result], StageProgress | None]:
    """The final points the search did not run, in the final stage's own Tuner (a grid over them); its results and,
    when it did not finish, where it stands."""
    from ray import tune

    spec = context.spec
    callback = stage_callback(context, store, parent, stage=R.STAGE_FINAL)
    param_space = {SPEC_KEY: trial_spec_data(spec), FINAL_KEY: tune.grid_search(points)}
    tuner = final_tuner(context, param_space, callback, len(points))
    with fit_window():
        grid = unwrapped(tuner.fit)
    ledger = stage_ledger(tuner)
    failures.extend(failures_of(grid))
    if not ledger.finished(len(points)):
        return [], StageProgress.of(ledger, R.STAGE_FINAL, len(points))
    return results_of(grid), None

"""The search stage: the plan's cells searched by one dispatching searcher in Ray's ``tune`` experiment
(:func:`study.search.tuners.search_tuner`); a table's cells start their final trials in it as their search ends."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from study.runtime.stopping import check_stop, fit_window
from study.search.stages.base import Stage, StageResult, StageRun
from study.tracking.optuna_link import trial_numbers
from study.tracking.outage import unwrapped
from trainables.schema import record as R
from trainables.schema.trial import SPEC_KEY

if TYPE_CHECKING:
    from study.intake.plan import StudyPlan

__all__ = ["SearchStage"]


class SearchStage(Stage):
    """The search: every run has it, first."""

    tag = R.STAGE_SEARCH
    experiment = R.SEARCH_EXPERIMENT
    searches = True

    def runs_in(self, plan: StudyPlan) -> bool:
        return True

    def planned(self, plan: StudyPlan) -> int:
        return plan.search_trials

    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        """The search from the plan (a resume continues its experiment); its outcome by the final stage's rule."""
        from study.search import outcome as O  # defers Ray: the bill and --status read a stage's plan only
        from study.search.trial_record import stage_callback, trial_spec_data  # defers Ray, as above
        from study.search.tuners import search_tuner, stage_ledger  # defers Ray, as above

        context, store, parent = run.context, run.store, run.parent
        spec = context.spec
        callback = stage_callback(context, store, parent, stage=self.tag)
        store.set_tags(parent, {R.STAGE: self.tag} if not context.resuming else {})
        tuner = search_tuner(context, {SPEC_KEY: trial_spec_data(spec)}, callback)
        check_stop("before the search stage started")
        with fit_window():
            results = O.SearchResults.of(unwrapped(tuner.fit))
        ledger = stage_ledger(tuner)
        # A table replaces its cells' lost trials (study.search.cell_search): after a stop, one may still be due. Its
        # cells' final trials are the experiment's too.
        planned = context.plan.search_trials + len(results.finals)
        done = ledger.finished(planned, errors_replaced=context.plan.replace_lost)
        progress = None if done else O.StageProgress.of(ledger, self.tag, planned)
        order = trial_numbers(context.layout.optuna_url, spec.name)
        outcome = dataclasses.replace(
            O.summarize(spec, results.trials, order, progress), parent_run_id=parent, experiment_id=store.experiment_id
        )
        return StageResult(outcome, results)

"""A choice the rungs made (halving) says how reliable it was in one line, the same from Ray's live results (the
console, study.progress.selection_line) and from Optuna (``--status`` and the report, study.final.reliability.of_trials):
each candidate's per-class validation record at the rung is kept by both, including the record of the result a
scheduler stops a trial on, which Ray hands to ``on_trial_complete`` only (before, the searcher kept the epoch before
it, and the two lines disagreed: P(best) 0.68 live, 1.00 from Optuna, on bspml_glyphs with 4 trials and η 2).

Real Optuna (in memory) behind the run's searcher classes; Ray's calls are made as its controller makes them: each
epoch's result to the searcher and the live view, the stopping result to ``on_trial_complete`` only."""

from __future__ import annotations

import json
from types import SimpleNamespace

from study.final.reliability import of_trials
from study.progress import ProgressTable, TrialColumns, selection_line
from study.search.cell_search import CellBudget, CellSearch
from study.search.space import make_sampler, to_optuna
from study.search.study_search import StudySearch
from trainables.metrics.per_class import PerClass, to_record
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH
from trainables.schema.space import FloatParam, SamplerSpec

METRIC, EPOCHS, RUNG = "val/recall_at_1", 4, 2


def _record(hits: list[int]) -> str:
    fold = PerClass(classes=list(range(len(hits))), sums=[float(h) for h in hits], counts=[5] * len(hits))
    return json.dumps({"metric": "recall_at_1", "folds": [to_record(fold)]})


def _result(epoch: int, hits: list[int]) -> dict:
    return {
        METRIC: sum(hits) / (5 * len(hits)),
        EPOCH: epoch,
        "training_iteration": epoch,
        R.VAL_PER_CLASS: _record(hits),
    }


def test_a_rung_choice_gets_the_same_selection_line_live_and_from_optuna():
    space = {"x": FloatParam(type="float", low=0.0, high=1.0)}
    searcher = StudySearch(
        space=to_optuna(space),
        metric=METRIC,
        mode="max",
        sampler=make_sampler(SamplerSpec(type="random", seed=0)),
        max_t=EPOCHS,
    )
    search = CellSearch([("c", {}, searcher)], CellBudget(2, rungs=frozenset({RUNG})), METRIC, "max")
    view = ProgressTable(TrialColumns(METRIC, "max", 2, EPOCHS))
    view.rungs = frozenset({RUNG})
    ids = ["a", "b"]
    configs = {t: search.suggest(t) for t in ids}
    # Epochs 1 and 2 of both; at the rung "a" is stopped (its epoch-2 result goes to on_trial_complete only), "b"
    # trains on to epoch 4. Close scores at the rung: a real P(best) below 1.
    history = {
        "a": [_result(1, [1, 2, 1, 2]), _result(2, [3, 3, 4, 3])],
        "b": [_result(1, [2, 2, 2, 2]), _result(2, [4, 3, 3, 4]), _result(3, [4, 4, 3, 4]), _result(4, [4, 4, 4, 4])],
    }
    trials = {
        t: SimpleNamespace(
            trial_id=t, status="RUNNING", last_result={}, config=configs[t], metric_n_steps={METRIC: {"10": []}}
        )
        for t in ids
    }
    for t, results in history.items():
        for i, result in enumerate(results):
            trials[t].last_result = result
            trials[t].metric_n_steps[METRIC]["10"].append(result[METRIC])  # Ray keeps a metric's last 10 values
            if t == "a" and i == len(results) - 1:
                view.on_trial_result(0, list(trials.values()), trials[t], result)  # the view sees every result
                search.on_trial_complete(t, result)  # the scheduler's STOP: the searcher sees it on completion
            else:
                view.on_trial_result(0, list(trials.values()), trials[t], result)
                search.on_trial_result(t, result)
        if t == "b":
            search.on_trial_complete(t, results[-1])
        trials[t].status = "TERMINATED"

    live = selection_line("c", list(trials.values()), (METRIC, "max"), EPOCHS, view.rung_records)
    stored = of_trials(searcher._ot_study.get_trials(deepcopy=False), "max", EPOCHS)
    assert stored is not None and live is not None
    assert stored.line("c") == live
    assert f"at the rung of epoch {RUNG}" in live and "P(best)" in live
    assert 0.5 < stored.p_best < 1.0, live

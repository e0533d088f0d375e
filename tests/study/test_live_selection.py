"""The live view names the best as the final stage does (among trials that trained every epoch) and, once a cell's
search has ended, says how reliable its choice is, from the per-class validation results its trials reported
(study.final.reliability). Built on stand-in Ray trials: the render reads ``trial_id``, ``status``, ``config`` and
``last_result`` only."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from harness.driver import tiny_spec
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.progress import CellProgress, ProgressTable, TrialColumns
from trainables.metrics.per_class import PerClass, to_record
from trainables.schema import record as R
from trainables.schema.trial import CELL_KEY

METRIC, EPOCHS = "val/recall_at_1", 4


def _record(hits: list[int]) -> str:
    """One fold of 4 classes with 5 queries each, ``hits`` of them retrieved right per class."""
    fold = PerClass(classes=[0, 1, 2, 3], sums=[float(h) for h in hits], counts=[5, 5, 5, 5])
    return json.dumps({"metric": "recall_at_1", "folds": [to_record(fold)]})


def _trial(
    trial_id: str, status: str, epoch: int, value: float, hits: list[int] | None = None, metric: str = METRIC, **config
) -> SimpleNamespace:
    result = {"epoch": epoch, metric: value}
    if hits is not None:
        result[R.VAL_PER_CLASS] = _record(hits)
    return SimpleNamespace(trial_id=trial_id, status=status, config=config, last_result=result)


def _render(view, trials) -> str:
    return view.render(trials)


def test_a_trial_stopped_early_is_never_the_live_best_and_an_ended_search_says_how_reliable_its_choice_is():
    view = ProgressTable(TrialColumns(METRIC, "max", 3, EPOCHS, ()), interval_s=0.0, stream=io.StringIO())
    trials = [
        _trial("early", "TERMINATED", 1, 0.99),  # stopped at a rung: its epoch-1 value is not comparable
        _trial("full_a", "TERMINATED", EPOCHS, 0.70, [4, 3, 4, 3]),
        _trial("full_b", "RUNNING", 2, 0.80),
    ]
    text = _render(view, trials)
    assert "best full_a" in text and "selection" not in text, text  # the search has not ended
    trials[2] = _trial("full_b", "TERMINATED", EPOCHS, 0.70, [4, 3, 4, 3])  # the same classes: indistinguishable
    text = _render(view, trials)
    assert "selection: this study: the winner is one of 2 indistinguishable candidates (P(best) 0.50, 1/n 0.50)" in text


def test_each_ended_cell_of_a_table_gets_its_line_and_a_cell_without_classes_none():
    spec = parse_spec(tiny_spec("t_live", EPOCHS, 2, replicates=2))
    plan = StudyPlan.of_study(spec)
    first, second = (c.label for c in plan.cells)
    view = CellProgress(plan, interval_s=0.0, stream=io.StringIO())
    m = plan.base.search.objective
    trials = [
        _trial("a", "TERMINATED", EPOCHS, 0.95, [5, 5, 5, 4], m, **{CELL_KEY: first}),  # clearly better on every class
        _trial("b", "TERMINATED", EPOCHS, 0.20, [1, 1, 1, 1], m, **{CELL_KEY: first}),
        _trial("c", "TERMINATED", EPOCHS, 0.50, None, m, **{CELL_KEY: second}),  # no per-class record: no line
        _trial("d", "TERMINATED", EPOCHS, 0.40, None, m, **{CELL_KEY: second}),
    ]
    text = _render(view, trials)
    assert f"selection: {first}: the winner is clear (P(best) 1.00, 1/n 0.50)" in text, text
    assert f"selection: {second}" not in text

"""One selection line per cell, the same string wherever it is said: the console after the search (Ray's live
trials), ``--status`` and the report (the cell's Optuna trials), the parent run's tag. ``--status`` names the race
winner and the reliability of its choice."""

from __future__ import annotations

import io
import json
from collections import deque
from types import SimpleNamespace

import optuna
import pytest

from dashboards.report import selection_lines
from harness.driver import tiny_spec
from study.cell_status import CellStatus
from study.commands import status
from study.final.race import Standing, race_csv
from study.final.reliability import Chosen, Reliability, RungChoice, of_trials
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.progress import ProgressTable, TrialColumns
from study.search.stages import counted_stages
from trainables.metrics.per_class import PerClass, to_record
from trainables.schema import record as R
from trainables.schema.trial import CELL_KEY, FINAL_KEY, RACE_KEY

EPOCHS = 4
#: Per trial: hits per class (5 queries each) at its last epoch, its value at every epoch, its last epoch.
TRIALS = [
    ([4, 3, 4, 3], [0.30, 0.50, 0.60, 0.70], EPOCHS),
    ([4, 4, 3, 3], [0.20, 0.40, 0.65, 0.70], EPOCHS),
    ([2, 1, 2, 1], [0.35, 0.45, 0.55, 0.30], EPOCHS),
]


def _record(hits: list[int]) -> dict:
    fold = PerClass(classes=[0, 1, 2, 3], sums=[float(h) for h in hits], counts=[5, 5, 5, 5])
    return {"metric": "recall_at_1", "folds": [to_record(fold)]}


def _plan() -> StudyPlan:
    return StudyPlan.of_study(parse_spec(tiny_spec("t_line", EPOCHS, len(TRIALS))))


def _ray_trial(i: int, metric: str, label: str, trial: tuple) -> SimpleNamespace:
    hits, values, last = trial
    result = {"epoch": last, metric: values[last - 1], R.VAL_PER_CLASS: json.dumps(_record(hits))}
    steps = {metric: {"5": deque(values[:last], maxlen=5), "10": deque(values[:last], maxlen=10)}}
    return SimpleNamespace(
        trial_id=f"t{i}", status="TERMINATED", config={CELL_KEY: label}, last_result=result, metric_n_steps=steps
    )


def _optuna_trial(i: int, trial: tuple, state: str = "COMPLETE") -> optuna.trial.FrozenTrial:
    hits, values, last = trial
    frozen = optuna.trial.create_trial(
        state=optuna.trial.TrialState[state],
        value=values[last - 1],
        intermediate_values={e + 1: v for e, v in enumerate(values[:last])},
        user_attrs={R.VAL_PER_CLASS: _record(hits), R.OPTUNA_LAST_TWO: values[last - 2 : last]},
    )
    frozen.number = i
    return frozen


def _console(plan: StudyPlan, trials: list[tuple]) -> str:
    metric, label = plan.base.search.objective, plan.cells[0].label
    view = ProgressTable(TrialColumns(metric, "max", len(trials), EPOCHS), interval_s=0.0, stream=io.StringIO())
    text = view.render([_ray_trial(i, metric, label, t) for i, t in enumerate(trials)])
    (line,) = [x for x in text.splitlines() if x.startswith("selection:")]
    return line


def _status_lines(plan: StudyPlan, cell: CellStatus, capsys) -> list[str]:
    capsys.readouterr()
    status._print_choices(plan, [cell])
    return [x.strip() for x in capsys.readouterr().out.splitlines()]


def test_the_console_status_and_report_print_one_identical_line(capsys):
    plan = _plan()
    found = of_trials([_optuna_trial(i, t) for i, t in enumerate(TRIALS)], "max", EPOCHS)
    assert isinstance(found, Reliability) and found.stability is not None  # the line carries ρ
    cell = CellStatus(plan.cells[0], {"COMPLETE": 3}, 0.7, reliability=found)
    console = _console(plan, TRIALS)
    assert [console] == _status_lines(plan, cell, capsys) == selection_lines([cell])
    assert console.startswith(f"selection: {plan.cells[0].label}: ") and "ρ" in console


def test_a_halving_cell_is_never_silent_and_its_line_is_the_same_everywhere(capsys):
    plan = _plan()
    # Trial 2 stopped at the rung of epoch 2, trial 0 at epoch 3; trial 1 trained every epoch.
    trials = [TRIALS[0][:2] + (3,), TRIALS[1], TRIALS[2][:2] + (2,)]
    optuna_trials = [_optuna_trial(i, t, "PRUNED" if t[2] < EPOCHS else "COMPLETE") for i, t in enumerate(trials)]
    found = of_trials(optuna_trials, "max", EPOCHS)
    assert isinstance(found, RungChoice) and (found.epoch, found.candidates, found.kept) == (3, 2, 1)
    cell = CellStatus(plan.cells[0], {"COMPLETE": 1, "PRUNED": 2}, 0.7, reliability=found)
    assert [_console(plan, trials)] == _status_lines(plan, cell, capsys) == selection_lines([cell])


def test_status_names_the_race_winner_and_the_reliability_of_its_choice(capsys):
    spec = tiny_spec("t_line", EPOCHS, len(TRIALS))
    spec["validation"] = {"kind": "holdout", "fraction": 0.5}
    spec["final"] = {**spec.get("final", {}), "seeds": 1, "race": {"finalists": 2, "seeds": 2}}
    plan = StudyPlan.of_study(parse_spec(spec))
    label = plan.cells[0].label
    race = race_csv(  # the race's own writer: what the driver logs to the parent run
        [
            Standing(R.GROUP_ALL, "t0", 0, 0.7, (0.6, 0.65)),
            Standing(R.GROUP_ALL, "t1", 1, 0.7, (0.72, 0.74), winner=True),
        ]
    )
    chooser = next(s for s in counted_stages(plan) if s.winner_name)
    winners = chooser.chosen(plan, lambda path: race if path == R.RACE_FILE else None)
    assert winners == {label: (1, pytest.approx(0.72))}
    optuna_trials = [_optuna_trial(i, t) for i, t in enumerate(TRIALS)]
    searched = of_trials(optuna_trials, "max", EPOCHS)
    raced = of_trials(optuna_trials, "max", EPOCHS, Chosen(1, chooser.winner_name))
    assert isinstance(searched, Reliability) and isinstance(raced, Reliability)
    assert searched.winner == 0 and raced.winner == 1 and raced.p_best != pytest.approx(searched.p_best)
    cell = CellStatus(plan.cells[0], {"COMPLETE": 3}, 0.7, reliability=raced, chosen=winners[label])
    lines = _status_lines(plan, cell, capsys)
    assert lines[0].startswith(f"race winner: {label}: Optuna trial 1, ") and "the final stage retrains it" in lines[0]
    assert "(its race score)" in lines[0]
    assert lines[1] == raced.line(label) and f"{label}: the race winner (trial 1) is " in lines[1]
    assert f"P(best) {raced.p_best:.2f}" in lines[1]


def test_the_final_stage_table_names_no_best_seed_and_the_race_chooses_nothing_live():
    metric = "test/recall_at_1"
    final = [
        SimpleNamespace(
            trial_id=f"f{s}",
            status="TERMINATED",
            config={FINAL_KEY: {"seed": s}},
            last_result={"epoch": EPOCHS, metric: 0.5 + s / 10},
        )
        for s in range(2)
    ]
    view = ProgressTable(TrialColumns(metric, "max", 2, EPOCHS), interval_s=0.0, stream=io.StringIO())
    text = view.render(final)
    assert "best" not in text and "0.6" in text, text
    plan = _plan()
    objective = plan.base.search.objective
    race = [_ray_trial(i, objective, plan.cells[0].label, t) for i, t in enumerate(TRIALS)]
    for t in race:
        t.config[RACE_KEY] = {}
    view = ProgressTable(TrialColumns(objective, "max", 3, EPOCHS), interval_s=0.0, stream=io.StringIO())
    text = view.render(race)
    assert "best t0" in text and "selection:" not in text, text

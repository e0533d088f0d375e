"""The stages of a run as kinds over one base: the plan's stages in run order, each kind's tag, Ray experiment and
planned runs against hand counts, the driver's loop over them (one exit for a stop, no stage after a failed search), a
new kind being one class in the stage list, and the race's winners in the outcome."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.driver import honest_spec
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.search import driver
from study.search import stages as stages_module
from study.search.outcome import SearchResults, StageProgress, StudyOutcome
from study.search.stages import STAGES, Stage, StageResult, StageRun, stages_of
from study.search.stages.race import raced_outcome


def _plan(**final: Any) -> StudyPlan:
    """honest_spec's study (2 search trials, 2 epochs) with ``final`` in place of its final section."""
    return StudyPlan.of_study(parse_spec(honest_spec(final=final)))


def _outcome(**over: Any) -> StudyOutcome:
    fields: dict[str, Any] = dict(
        num_trials=2,
        num_failed=0,
        best_trial_id="a",
        best_value=0.5,
        best_params={},
        parent_run_id="p",
        interrupted=False,
        wall_time_s=0.0,
    )
    return StudyOutcome(**{**fields, **over})


@pytest.mark.parametrize(
    ("final", "expected"),
    [
        ({"seeds": 0}, ["search"]),
        ({"seeds": 2}, ["search", "final"]),
        ({"seeds": 2, "race": {"finalists": 2, "seeds": 3}}, ["search", "race", "final"]),
    ],
)
def test_the_plan_runs_the_stages_its_spec_asks_for_in_run_order(final, expected):
    assert [stage.tag for stage in stages_of(_plan(**final))] == expected


def test_each_kind_keeps_its_mlflow_tag_and_the_experiment_folder_existing_studies_hold():
    # The folders and tags are what studies on disk and in MLflow already carry: a resume finds them by these names.
    assert [(s.tag, s.experiment) for s in STAGES] == [
        ("search", "tune"),
        ("race", "tune_race"),
        ("final", "tune_final"),
        ("rounds", "rounds"),  # search.replicates {min, max}: the later rounds, each under rounds/<R>/
    ]


def test_each_kind_plans_the_runs_counted_by_hand():
    # 2 search trials, both train every epoch (fifo): the race retrains both finalists on 3 seeds; the final stage
    # retrains the one winner on 4 seeds.
    plan = _plan(seeds=4, race={"finalists": 2, "seeds": 3})
    assert {s.tag: s.planned(plan) for s in stages_of(plan)} == {"search": 2, "race": 2 * 3, "final": 1 * 4}
    assert {s.tag: s.planned(_plan(seeds=0)) for s in STAGES} == {"search": 2, "race": 0, "final": 0, "rounds": 0}


def test_the_base_asks_a_kind_for_at_most_three_methods_and_refuses_a_kind_without_them():
    assert Stage.__abstractmethods__ == {"runs_in", "planned", "run"}

    class Half(Stage):
        tag = "half"
        experiment = "tune_half"

        def runs_in(self, plan: StudyPlan) -> bool:
            return True

    with pytest.raises(TypeError):
        Half()


class _Recorder(Stage):
    """A stage that records its call and leaves ``outcome_of(before)`` as the run's outcome."""

    experiment = "tune_fake"

    def __init__(self, tag: str, calls: list[str], **outcome: Any) -> None:
        self.tag, self.calls, self.outcome = tag, calls, outcome  # type: ignore[misc]

    def runs_in(self, plan: StudyPlan) -> bool:
        return True

    def planned(self, plan: StudyPlan) -> int:
        return 1

    def run(self, run: StageRun, before: StageResult | None) -> StageResult:
        self.calls.append(f"{self.tag} after {before.outcome.best_trial_id if before else None}")
        outcome = _outcome(best_trial_id=self.tag, **self.outcome)
        return StageResult(outcome, SearchResults([], []))


def _loop(monkeypatch: pytest.MonkeyPatch, kinds: list[Stage]) -> StudyOutcome:
    """The driver's loop over ``kinds`` as the plan's stages."""
    monkeypatch.setattr(driver, "snapshot_failed_trials", lambda: None)
    monkeypatch.setattr(driver, "stages_of", lambda plan: kinds)
    context: Any = dataclasses.make_dataclass("Context", ["plan"])(None)
    return driver._run_stages(context, object(), "p")  # type: ignore[arg-type]


def test_the_driver_runs_each_stage_on_what_the_one_before_left(monkeypatch):
    calls: list[str] = []
    outcome = _loop(monkeypatch, [_Recorder(t, calls) for t in ("search", "race", "final")])
    assert calls == ["search after None", "race after search", "final after race"]
    assert outcome.best_trial_id == "final" and outcome.succeeded and outcome.wall_time_s > 0


def test_a_stop_in_a_stage_is_the_runs_one_exit_and_no_later_stage_starts(monkeypatch):
    calls: list[str] = []
    stopped = StageProgress("race", planned=6, trials=4, failed=1, unfinished=2)
    kinds = [_Recorder("search", calls), _Recorder("race", calls, interrupted=True, progress=stopped)]
    outcome = _loop(monkeypatch, [*kinds, _Recorder("final", calls)])
    assert calls == ["search after None", "race after search"]
    assert outcome.interrupted and outcome.progress == stopped and not outcome.succeeded


def test_no_stage_follows_a_search_whose_every_trial_failed(monkeypatch):
    calls: list[str] = []
    outcome = _loop(monkeypatch, [_Recorder("search", calls, num_failed=2), _Recorder("final", calls)])
    assert calls == ["search after None"] and outcome.num_failed == 2 and not outcome.interrupted


def test_a_new_kind_is_one_class_and_one_line_in_the_stage_list(monkeypatch):
    class Rounds(_Recorder):
        def runs_in(self, plan: StudyPlan) -> bool:
            return plan.base.final.seeds > 0

    rounds = Rounds("rounds", [])
    search, race, final, _ = STAGES
    monkeypatch.setattr(stages_module, "STAGES", (search, race, rounds, final))
    assert [s.tag for s in stages_module.stages_of(_plan(seeds=2))] == ["search", "rounds", "final"]
    assert [s.tag for s in stages_module.stages_of(_plan(seeds=0))] == ["search"]


def test_a_new_counted_kind_reaches_the_bill_the_status_rows_and_choices_without_naming_it(monkeypatch, capsys):
    """A kind that plans runs (its planned tag), trains them as search trials and chooses the trial the final stage
    retrains: the bill prices its runs as search trials and names them, --status gives it a column per cell, counts
    it among what is left and prints its choice, with no line of theirs naming it."""
    from study.bill import model_epochs, priced, size_line
    from study.cell_status import CellStatus
    from study.commands import status
    from study.runtime.driver_run import StageCounts

    class Probe(Stage):
        tag, experiment, planned_tag = "probe", "tune_probe", "probe_planned"
        runs_noun, column, searches, winner_name = "probe runs", "probe", True, "probe pick"

        def runs_in(self, plan: StudyPlan) -> bool:
            return plan.base.final.seeds > 0

        def planned(self, plan: StudyPlan) -> int:
            return 3 * len(plan.cells)

        def per_cell(self, plan: StudyPlan) -> int:
            return 3

        def run(self, run: StageRun, before: StageResult | None) -> StageResult:
            raise AssertionError("not run here")

        def bill_text(self, plan: StudyPlan) -> str:
            return "3 probe runs per cell, then "

        def chosen(self, plan: StudyPlan, parent_file: Any) -> dict[str, tuple[int, float]]:
            return {plan.cells[0].label: (1, 0.5)}

    plan = _plan(seeds=2)
    before = model_epochs(plan)
    search, race, final, rounds = STAGES
    monkeypatch.setattr(stages_module, "STAGES", (search, race, Probe(), final, rounds))
    assert [s.tag for s in stages_module.counted_stages(plan)] == ["probe", "final"]
    epochs = plan.base.train.epochs
    assert model_epochs(plan) == pytest.approx(before + 3 * plan.search_cost() * epochs)
    assert priced(plan).searched_after == 3 and "then 3 probe runs per cell, then " in size_line(plan)
    cell = CellStatus(plan.cells[0], {"COMPLETE": 2}, 0.5, done={"probe": 1, "final": 0}, chosen=(1, 0.5))
    row = status._rows(plan, [cell])[0]
    assert (row["probe"], row["final seeds"]) == ("1/3", "0/2")
    status._print_choices(plan, [cell])
    assert capsys.readouterr().out.strip().startswith(f"probe pick: {plan.cells[0].label}: Optuna trial 1, ")
    counts = StageCounts((2,), 2, later=(("probe", 1, 3), ("final", 0, None)))
    assert counts.left() == ["probe: 1 of 3 runs", "final: not started"]


def _result(objective: str, trial: str, value: float) -> Any:
    """A search trial's result as Ray hands it over: its directory names its trial, its config its sampled values."""
    from ray.tune import Result

    metrics = {objective: value, "config": {"lr": value}}
    return Result(metrics=metrics, checkpoint=None, error=None, path=f"/x/trial_{trial}")


def test_the_race_winner_takes_the_search_bests_place_with_its_search_value():
    spec = parse_spec(honest_spec(final={"seeds": 2, "race": {"finalists": 2, "seeds": 3}}))
    before = _outcome(best_trial_id="a", best_value=0.9, cell_bests={spec.name: ("a", 0.9), "other": ("c", 0.1)})
    objective = spec.search.objective
    winners = {spec.name: _result(objective, "b", 0.7), "absent": _result(objective, "d", 0.3)}
    after = raced_outcome(spec, before, winners, [])
    assert (after.best_trial_id, after.best_value) == ("b", 0.7)
    assert after.cell_bests == {spec.name: ("b", 0.7), "other": ("c", 0.1)}
    assert after.best_params == {"lr": 0.7}


@pytest.mark.parametrize(
    ("tags", "line"),
    [
        ({}, "search"),
        ({"stage": "search"}, "search"),
        ({"stage": "race", "race_planned": "8"}, "race (racing the finalists on more seeds: 8 runs planned)"),
        ({"stage": "final", "final_planned": "12"}, "final (retraining the best configurations: 12 runs planned)"),
        ({"stage": "done", "final_planned": "12"}, "done"),
    ],
)
def test_status_names_the_tagged_stage_and_what_it_planned_as_before(tags, line):
    from study.commands.status import _stage_text

    assert _stage_text(tags) == line

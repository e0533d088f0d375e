"""``search.replicates: {min, max}`` without Ray: the schema (an integer dumps as before, a mapping is checked, a study
refuses it in one line), the plan (every replicate up to max, the first round, the comparisons as the report makes
them), the rounds' wiring (which cells each round adds, frozen decisions, a replay that gives the same looks) with
the stages faked, the bill's least and most, and ``--status``'s lines."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import yaml

from harness.driver import honest_spec, tiny_table
from study.bill import check_budget, model_epochs, size_line
from study.final import sequential as S
from study.final.stage import FinalGroup
from study.intake.cells import parse_table
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from study.search.outcome import SearchResults, StageProgress, StudyOutcome
from study.search.stages import STAGES, StageResult, StageRun, stages_of
from study.search.stages import rounds as rounds_module
from study.search.stages.rounds import RoundsStage, decisions_of, replicate_values
from trainables.schema.errors import SpecError
from trainables.schema.table import TableSpec

METRIC = "test/recall_at_1"
SEEDS = (0, 1, 2, 3, 4)


def _table(replicates: Any = None, **over: Any) -> dict:
    """tiny_table (ms the reference, spl; one condition), 2 trials × 2 epochs, 5 final seeds, assumed 10 s an epoch."""
    t = tiny_table("t_rounds", 2, 2, 2, len(SEEDS), **over)
    t["search"]["epoch_seconds"] = 10
    if replicates is not None:
        t["search"]["replicates"] = replicates
    return t


def _three_arms(replicates: Any) -> StudyPlan:
    """ms (the reference), spl, proxy_anchor × noise 0.1 and 0.3: four comparisons, each reference key in two."""
    t = _table(replicates, cells={"dataset.noise.ratio": [0.1, 0.3]})
    t["arms"]["pa"] = {"family": "proxy_anchor", "space": {}}
    return parse_table(t)


# ------------------------------------------------------------------------------------------------------------ schema


def test_an_integer_dumps_as_before_and_a_range_as_its_mapping():
    assert TableSpec.model_validate(_table(3)).model_dump(mode="json")["search"]["replicates"] == 3
    assert "  replicates: 3\n" in yaml.safe_dump(TableSpec.model_validate(_table(3)).model_dump(mode="json"))
    spec = TableSpec.model_validate(_table({"min": 2, "max": 4}))
    assert spec.model_dump(mode="json")["search"]["replicates"] == {"min": 2, "max": 4}


@pytest.mark.parametrize(
    ("replicates", "line"),
    [
        ({"min": 1, "max": 3}, "table: search.replicates.min: Input should be greater than or equal to 2 (got 1)"),
        ({"min": 3, "max": 2}, "table: search.replicates: min <= max must hold, but got min=3, max=2"),
        ({"min": 2}, "table: missing required key 'search.replicates.max'"),
        ({}, "table: missing required key 'search.replicates.max'"),
        ({"min": 2, "max": 3, "step": 1}, "table: unknown key 'search.replicates.step'"),
        (0, "table: search.replicates: Input should be greater than or equal to 1 (got 0)"),
    ],
)
def test_a_bad_range_is_one_line_naming_its_key(replicates, line):
    with pytest.raises(SpecError) as e:
        parse_table(_table(replicates))
    assert str(e.value) == line


def test_min_left_out_is_three_or_max_if_smaller():
    """The verdicts benchmark's default (docs/notebook/selection.md): at min 2 the first look decided nothing."""
    for given, expected in (({"max": 5}, {"min": 3, "max": 5}), ({"max": 2}, {"min": 2, "max": 2})):
        spec = TableSpec.model_validate(_table(given))
        assert spec.model_dump(mode="json")["search"]["replicates"] == expected


def test_a_study_refuses_the_range_in_one_line_naming_the_key():
    spec = honest_spec()
    spec["search"]["replicates"] = {"min": 2, "max": 3}
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert str(e.value).startswith("spec: search.replicates: {min, max} decides a table's comparisons")
    assert "\n" not in str(e.value)


# -------------------------------------------------------------------------------------------------------------- plan


def test_the_plan_holds_every_replicate_and_runs_the_first_round_first():
    plan = parse_table(_table({"min": 2, "max": 4}))
    assert plan.sequential == S.SequentialPlan(2, 4) and plan.replicates == 4
    assert sorted(c.label for c in plan.cells) == sorted(
        f"{arm}.p0.2{suffix}" for arm in ("ms", "spl") for suffix in ("", ".r1", ".r2", ".r3")
    )
    first = plan.first_round
    assert sorted(c.label for c in first.cells) == ["ms.p0.2", "ms.p0.2.r1", "spl.p0.2", "spl.p0.2.r1"]
    assert sorted(c.label for c in first.later) == ["ms.p0.2.r2", "ms.p0.2.r3", "spl.p0.2.r2", "spl.p0.2.r3"]
    assert first.first_round == first and first.sequential == plan.sequential
    # A round is a plain plan of its cells (no rounds after it), its lag from its own cells.
    one = first.round_of([c for c in first.later if c.replicate == 2])
    assert one.sequential is None and one.later == () and len(one.cells) == 2
    assert [s.tag for s in stages_of(first)] == ["search", "final", "rounds"]
    assert [s.tag for s in stages_of(one)] == ["search", "final"]
    # A fixed R is the plan as before.
    fixed = parse_table(_table(3))
    assert fixed.sequential is None and fixed.first_round is fixed and len(fixed.cells) == 6


def test_the_comparisons_are_the_reports_every_arm_against_the_reference_on_its_condition():
    plan = _three_arms({"min": 2, "max": 3})
    assert plan.comparisons == {
        "spl.p0.1": ("spl.p0.1", "ms.p0.1"),
        "spl.p0.3": ("spl.p0.3", "ms.p0.3"),
        "pa.p0.1": ("pa.p0.1", "ms.p0.1"),
        "pa.p0.3": ("pa.p0.3", "ms.p0.3"),
    }
    assert StudyPlan.of_study(parse_spec(honest_spec())).comparisons == {}


# ------------------------------------------------------------------------------------------------- decision wiring


def _values(rng: np.random.Generator, mean: float) -> dict[int, float]:
    """One replicate's final values by seed around ``mean`` (search sd 0.003, seed noise 0.002)."""
    shift = rng.normal(0, 0.003)
    return {s: mean + shift + rng.normal(0, 0.002) for s in SEEDS}


MEANS = {"ms": 0.5, "spl": 0.5, "pa": 0.7}  # pa is far better than ms; spl is ms again (an A-vs-A pair)


def _done(plan: StudyPlan, replicates: dict[str, int], seed: int = 0) -> dict[str, dict[int, float]]:
    """Per cell label of the first ``replicates[key]`` replicates of each key, its values (``MEANS`` by arm)."""
    rng = np.random.default_rng(seed)
    return {
        c.label: _values(rng, MEANS[c.arm])
        for c in sorted(plan.every_cell, key=lambda c: (c.key, c.replicate))
        if c.replicate < replicates.get(c.key, 0)
    }


def test_a_clear_effect_is_decided_and_frozen_while_its_reference_goes_on_for_the_open_one():
    plan = _three_arms({"min": 3, "max": 5}).first_round
    done = _done(plan, dict.fromkeys(plan.keys, 3))
    first = decisions_of(plan, done)
    assert first["pa.p0.1"].state == S.BETTER and first["pa.p0.1"].round == 3
    assert first["spl.p0.1"].is_open and first["spl.p0.1"].replicates == 3
    going = S.cells_to_continue(first, plan.comparisons)
    # pa's cells are done; ms goes on for spl (its comparison is open), with spl.
    assert going == {"spl.p0.1", "spl.p0.3", "ms.p0.1", "ms.p0.3"}
    # The reference's extra replicates (wildly different, even) never reopen pa's frozen comparison.
    more = {**done, **{f"{k}.r3": {s: 0.9 for s in SEEDS} for k in going}}
    after = decisions_of(plan, more)
    assert after["pa.p0.1"] == first["pa.p0.1"]
    assert after["spl.p0.1"].replicates == 4


def test_a_look_waits_for_a_whole_round_and_a_lost_seed_later_never_changes_an_earlier_look():
    plan = _three_arms({"min": 3, "max": 5}).first_round
    whole = _done(plan, {**dict.fromkeys(plan.keys, 3), "ms.p0.1": 4, "spl.p0.1": 4, "ms.p0.3": 4, "spl.p0.3": 4})
    done = {k: v for k, v in whole.items() if not k.endswith(".r3") or k == "ms.p0.1.r3"}  # spl's 4th still runs
    assert len(replicate_values(plan, done)["ms.p0.1"]) == 4
    assert decisions_of(plan, done)["spl.p0.1"].replicates == 3  # look 1 needs both cells' 4th replicate
    lost = {**whole, "ms.p0.1.r3": {s: v for s, v in whole["ms.p0.1.r3"].items() if s != 0}}
    first, after = decisions_of(plan, done), decisions_of(plan, lost)
    # pa was decided at look 0 on three replicates; the reference's 4th, short of a seed, does not touch it.
    assert after["pa.p0.1"] == first["pa.p0.1"] and after["pa.p0.1"].round == 3
    # spl's look 1 is taken on the seeds its four replicates share (4 of 5): not the same as with every seed.
    assert after["spl.p0.1"].replicates == 4
    assert after["spl.p0.1"].delta != decisions_of(plan, whole)["spl.p0.1"].delta


def test_an_open_comparison_at_max_is_not_detectable_with_its_minimum_detectable_effect():
    plan = parse_table(_table({"min": 2, "max": 3})).first_round
    out = decisions_of(plan, _done(plan, {"ms.p0.2": 3, "spl.p0.2": 3}))["spl.p0.2"]
    assert out.state == S.NOT_DETECTABLE and out.round == out.replicates == 3 and out.mde > 0


def test_one_final_seed_cannot_be_judged_so_every_round_runs_and_ends_not_detectable():
    plan = parse_table(_table({"min": 2, "max": 3})).first_round
    done = {label: {0: v[0]} for label, v in _done(plan, {"ms.p0.2": 2, "spl.p0.2": 2}).items()}
    first = decisions_of(plan, done)["spl.p0.2"]
    assert first.is_open and first.replicates == 2
    assert S.cells_to_continue({"spl.p0.2": first}, plan.comparisons) == {"spl.p0.2", "ms.p0.2"}
    done.update({"ms.p0.2.r2": {0: 0.5}, "spl.p0.2.r2": {0: 0.5}})
    assert decisions_of(plan, done)["spl.p0.2"].state == S.NOT_DETECTABLE


def _outcome(groups: list[FinalGroup], **over: Any) -> StudyOutcome:
    fields: dict[str, Any] = dict(
        num_trials=len(groups), num_failed=0, best_trial_id="a", best_value=0.5, best_params={}, parent_run_id="p",
        interrupted=False, wall_time_s=0.0, final=groups,
    )  # fmt: skip
    return StudyOutcome(**{**fields, **over})


def _groups(done: dict[str, dict[int, float]], labels: list[str]) -> list[FinalGroup]:
    return [FinalGroup(label, "t", by_seed={METRIC: done[label]}) for label in labels]


class _Store:
    """What the rounds stage writes to the parent run: the summary of every round's groups."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.texts.append((artifact_file, text))


def _rounds(monkeypatch: pytest.MonkeyPatch, plan: StudyPlan, done: dict, stop_at: int | None = None) -> tuple:
    """RoundsStage.run over ``plan``'s first round with each round faked: it "runs" its cells (their values from
    ``done``), or stops at round ``stop_at``. Returns the rounds' cells and the stage's result."""
    ran: list[list[str]] = []

    def fake_round(self: RoundsStage, run: StageRun, cells: list, replicates: int) -> StageResult:
        labels = [c.label for c in cells]
        ran.append(labels)
        if replicates == stop_at:
            progress = StageProgress("search", len(cells), 1, 0, 1)
            return StageResult(_outcome([], interrupted=True, progress=progress), SearchResults([], []))
        return StageResult(_outcome(_groups(done, labels)), SearchResults([], []))

    monkeypatch.setattr(RoundsStage, "_round", fake_round)
    context: Any = dataclasses.make_dataclass("Context", ["plan", "spec"])(plan, plan.base)
    store = _Store()
    first = _outcome(_groups(done, [c.label for c in plan.cells]))
    rounds = next(s for s in STAGES if isinstance(s, RoundsStage))
    result = rounds.run(StageRun(context, store, "p"), StageResult(first, SearchResults([], [])))  # type: ignore[arg-type]
    return ran, result, store


def test_each_round_adds_the_next_replicate_of_the_open_comparisons_cells_only(monkeypatch):
    plan = _three_arms({"min": 3, "max": 5}).first_round
    done = _done(plan, dict.fromkeys(plan.keys, 5))
    ran, result, store = _rounds(monkeypatch, plan, done)
    open_cells = ["ms.p0.1", "ms.p0.3", "spl.p0.1", "spl.p0.3"]
    assert [sorted(r) for r in ran] == [sorted(f"{c}.r3" for c in open_cells), sorted(f"{c}.r4" for c in open_cells)]
    assert len(result.outcome.final) == 3 * 2 * 3 + 8 and result.outcome.succeeded
    assert store.texts and store.texts[-1][0] == "final_summary.csv"
    # The decisions the status replays from the same values: pa decided at 3, spl not detectable at 5.
    states = decisions_of(plan, done)
    assert {k: (d.state, d.round) for k, d in states.items()} == {
        "spl.p0.1": (S.NOT_DETECTABLE, 5),
        "spl.p0.3": (S.NOT_DETECTABLE, 5),
        "pa.p0.1": (S.BETTER, 3),
        "pa.p0.3": (S.BETTER, 3),
    }


def test_a_stop_in_a_round_is_the_runs_exit_and_the_replay_picks_the_same_cells_again(monkeypatch):
    plan = parse_table(_table({"min": 2, "max": 4})).first_round
    done = _done(plan, dict.fromkeys(plan.keys, 4))
    ran, result, _ = _rounds(monkeypatch, plan, done, stop_at=4)
    assert ran == [["ms.p0.2.r2", "spl.p0.2.r2"], ["ms.p0.2.r3", "spl.p0.2.r3"]]
    assert result.outcome.interrupted and result.outcome.progress is not None and not result.goes_on
    again, resumed, _ = _rounds(monkeypatch, plan, done)
    assert again == ran and resumed.outcome.succeeded


def test_a_stop_between_rounds_raises_before_the_next_round_writes_anything(monkeypatch):
    from study.runtime.stopping import StudyStopped

    plan = parse_table(_table({"min": 2, "max": 3})).first_round
    done = _done(plan, dict.fromkeys(plan.keys, 3))

    def stopped(where: str) -> None:
        raise StudyStopped(f"stopped on SIGUSR1 {where}")

    monkeypatch.setattr(rounds_module, "check_stop", stopped)
    with pytest.raises(StudyStopped, match="between replicate rounds, before round 3"):
        _rounds(monkeypatch, plan, done)


def test_the_stage_list_has_the_rounds_last_and_plans_the_later_rounds_at_most():
    plan = parse_table(_table({"min": 2, "max": 4}))
    rounds = STAGES[-1]
    assert rounds.tag == "rounds" and rounds.runs_in(plan.first_round)
    # 2 arms × 2 later replicates × (2 trials + 5 final seeds)
    assert rounds.planned(plan.first_round) == 2 * 2 * (2 + len(SEEDS))
    assert not rounds.runs_in(parse_table(_table(3)))


# -------------------------------------------------------------------------------------------------------------- bill


def test_the_bill_prices_the_least_and_the_most_as_the_fixed_tables_of_min_and_max():
    plan = parse_table(_table({"min": 2, "max": 4}))
    least, most = parse_table(_table(2)), parse_table(_table(4))
    assert model_epochs(plan.at_least) == model_epochs(least) and model_epochs(plan.at_most) == model_epochs(most)
    line = size_line(plan)
    assert line.startswith(size_line(most).split(" × 2 trials")[0].replace("4 replicates", "2–4 replicates"))
    assert (
        f"at least {model_epochs(least):.0f} model-epochs (≈ {_hours(least)}), at most {model_epochs(most):.0f} "
        f"(≈ {_hours(most)})"
    ) in line
    assert size_line(plan.first_round) == line  # the first round's plan is billed as the table


def _hours(plan: StudyPlan) -> str:
    from study.bill import estimated_hours

    hours = estimated_hours(plan)
    assert hours is not None
    return f"{hours:.1f} h"


def test_max_hours_holds_the_table_to_its_most():
    t = _table({"min": 2, "max": 4})
    most_h = float(_hours(parse_table(_table(4))).split()[0])
    least_h = float(_hours(parse_table(_table(2))).split()[0])
    t["search"]["max_hours"] = (least_h + most_h) / 2
    with pytest.raises(SpecError, match="search.max_hours"):
        check_budget(parse_table(t))


# ------------------------------------------------------------------------------------------------------------ status


def test_status_says_each_comparisons_state(monkeypatch):
    import study.commands.status as status

    plan = _three_arms({"min": 2, "max": 5})
    decided = S.Decision(S.BETTER, 2, 0.2, 0.1, 0.3, 0.98, 0.05, 2)
    states = {
        "spl.p0.1": S.Decision(S.OPEN, None, 0.0, -0.1, 0.1, 0.99, 0.2, 3),
        "pa.p0.1": decided,
        "pa.p0.3": S.Decision(S.NOT_DETECTABLE, 5, 0.0, -0.1, 0.1, 0.99, 0.0123, 5),
    }
    monkeypatch.setattr(status, "comparison_states", lambda p: states)
    lines = status._round_lines(plan)
    assert lines[0].startswith("rounds: 2 replicates per cell")
    assert lines[1:] == [
        "  comparison spl.p0.1 vs ms.p0.1: open after 3 of ≤ 5 replicates",
        "  comparison spl.p0.3 vs ms.p0.3: open, before its first look (after 2 replicates)",
        "  comparison pa.p0.1 vs ms.p0.1: decided after 2: better (Δ +0.2000 [+0.1000, +0.3000])",
        "  comparison pa.p0.3 vs ms.p0.3: not detectable at this budget after 5, minimum detectable effect 0.0123",
    ]
    assert status._round_lines(parse_table(_table(3))) == []


def test_a_resume_of_a_table_of_rounds_finds_its_spec_unchanged_and_a_changed_range_refused():
    from study.search.resume import _WRITTEN_BEFORE, _changed, written_text

    plan = parse_table(_table({"min": 2, "max": 3}))
    assert _changed(written_text(plan), plan.written, _WRITTEN_BEFORE) == []
    wider = parse_table(_table({"min": 2, "max": 4}))
    assert _changed(written_text(plan), wider.written, _WRITTEN_BEFORE) == ["search.replicates.max"]

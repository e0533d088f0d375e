"""The measured bill (issue 50 item 3): the calibration's parts on the tiny data, the size line's arithmetic against a
hand computation with injected numbers (no timing asserts), halving's share, the max_hours refusal naming both bills,
and ``--plan`` starting nothing."""

from __future__ import annotations

import copy
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.driver import honest_spec, tiny_table
from study.bill import (
    assumed_bill,
    bill_of,
    calibrate_plan,
    check_budget,
    estimated_hours,
    model_epochs,
    priced,
    size_line,
)
from study.final.race import race_points
from study.final.stage import best_per_group, final_points, result_trial_id, top_per_group
from study.intake.cells import parse_table
from study.intake.load import load_plan
from study.intake.plan import StudyPlan, group_count
from study.intake.spec_reader import parse_spec
from study.search.calibration import ArmCalibration, Calibration, trial_of_family
from trainables.families.registry import get_rules
from trainables.schema.errors import SpecError
from trainables.schema.metric_names import EPOCH
from trainables.schema.space import SearchSpec
from trainables.schema.spec import StudySpec
from trainables.schema.trial import CELL_KEY

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
QUICK = yaml.safe_load((SPACES / "table_glyphs_quick.yaml").read_text())


def _arm(family: str, batch_s: float) -> ArmCalibration:
    """startup 2 s; a search epoch 4 × batch_s + 0.25 + 1 s; a final epoch the same with twice the evaluation."""
    return ArmCalibration(
        family=family,
        device="cpu",
        data_s=1.0,
        build_s=1.0,
        batch_s=batch_s,
        epoch_end_s=0.25,
        eval_s=1.0,
        eval_samples=100,
        search_batches=4,
        models=1,
        final_batches=4,
        final_eval_samples=200,
    )


CALIBRATION = Calibration({"ms": _arm("ms", 0.5), "spl": _arm("spl", 1.0)}, wall_s=1.0)


def test_calibration_measures_startup_batches_and_evaluation_apart_on_the_tiny_data():
    table = parse_table(tiny_table("t_cal", epochs=2, batches_per_epoch=4, num_trials=2, seeds=1))
    cal = calibrate_plan(table)
    assert set(cal.arms) == {"ms", "spl"} and cal.device == "cpu"
    for arm in cal.arms.values():
        parts = (arm.data_s, arm.build_s, arm.batch_s, arm.eval_s)
        assert all(math.isfinite(x) and x > 0 for x in parts), arm
        assert math.isfinite(arm.epoch_end_s) and arm.epoch_end_s >= 0
        assert arm.search_batches == arm.final_batches == 4 and arm.models == 1  # batches_per_epoch, no folds
        assert arm.search_epoch_s == pytest.approx(4 * arm.batch_s + arm.epoch_end_s + arm.eval_s)


def test_the_size_line_is_priced_per_arm_from_the_calibration():
    table = parse_table(tiny_table("t_price", epochs=3, batches_per_epoch=4, num_trials=2, seeds=1))
    bill = bill_of(table, CALIBRATION)
    assert bill is not None and bill.measured
    # ms: search epoch 2 + 0.25 + 1 = 3.25 s, final epoch 2 + 0.25 + 2 = 4.25 s, start-up 2 s; spl: 5.25 s, 6.25 s.
    ms = 2 * (2 + 3 * 3.25) + 1 * (2 + 3 * 4.25)
    spl = 2 * (2 + 3 * 5.25) + 1 * (2 + 3 * 6.25)
    assert estimated_hours(table, False, bill) == pytest.approx((ms + spl) / 1 / 3600)
    line = size_line(table, bill)
    assert "≈ 0.0 h on 1 slots measured on cpu: ms 3.25 s, spl 5.25 s per model-epoch" in line
    assert "start-up 2, 2 s a trial" in line
    assert size_line(table, bill_of(table)) == size_line(table)  # no epoch_seconds: unpriced
    assumed = parse_table(tiny_table("t_a", 3, 4, 2, 1, search={"num_trials": 2, "epoch_seconds": 10}))
    # The assumed constant keeps the old arithmetic: (search trials × search cost + final runs) × epochs × s.
    assert estimated_hours(assumed) == pytest.approx((4 * 1 + 2) * 3 * 10 / 3600)
    assert "at 10 s per model-epoch (assumed" in size_line(assumed)


def _halving_quick(**search):
    raw = copy.deepcopy(QUICK)
    raw["search"] = {
        **raw["search"],
        "reproducible": False,
        "scheduler": {"type": "halving", "first_rung": 1, "reduction_factor": 2},
        **search,
    }
    return parse_table(raw, "quick.yaml")


def test_halving_prices_its_exact_share_in_the_size_line():
    table = _halving_quick()
    # 4 trials, 4 epochs, rungs 1 and 2 at η 2: 2 stop at 1, 1 at 2, 1 runs 4: 8 of 16 epochs.
    assert table.scheduled and table.search_share == pytest.approx(0.5)
    cal = Calibration({"ms": _arm("ms", 0.5), "bspml": _arm("bspml", 1.0)}, wall_s=1.0)
    bill = bill_of(table, cal)
    line = size_line(table, bill)
    assert "with halving per cell (first rung 1, η 2, hedge 0, rungs at epoch 1, 2 of 4): the search = 50%" in line
    search, final = priced(table).stage_hours(bill)
    slots = table.base.search.max_concurrent
    hand = sum(4 * (2 + 0.5 * 4 * e) for e in (3.25, 3.25, 5.25, 5.25)) / slots / 3600
    assert search == pytest.approx(hand)
    assert f"≈ {search + final:.1f} h" in line


def test_max_hours_refuses_on_the_measured_bill_naming_fifo_and_the_scheduled_one():
    slow = Calibration({"ms": _arm("ms", 500.0), "bspml": _arm("bspml", 500.0)}, wall_s=1.0)
    raw = copy.deepcopy(QUICK)
    raw["search"] = {**raw["search"], "max_hours": 1}
    fifo = parse_table(raw, "quick.yaml")
    with pytest.raises(SpecError) as e:
        check_budget(fifo, bill_of(fifo, slow))
    assert "measured on cpu" in str(e.value) and "FIFO ≈" in str(e.value) and "with halving (" in str(e.value)
    halving = _halving_quick(max_hours=1)
    with pytest.raises(SpecError) as e:
        check_budget(halving, bill_of(halving, slow))
    hours = estimated_hours(halving, True, bill_of(halving, slow))
    assert (
        f"FIFO ≈ {estimated_hours(halving, False, bill_of(halving, slow)):.1f} h; with halving ≈ {hours:.1f} h"
        in str(e.value)
    )
    fast = Calibration({"ms": _arm("ms", 0.01), "bspml": _arm("bspml", 0.01)}, wall_s=1.0)
    check_budget(fifo, bill_of(fifo, fast))  # under the limit: nothing said


def test_plan_prints_the_priced_size_line_and_starts_nothing(tmp_path, write_spec, monkeypatch, capsys):
    from study.commands.run import main

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    spec = write_spec(tiny_table("t_plan", epochs=2, batches_per_epoch=2, num_trials=2, seeds=1))
    assert main([str(spec), "--plan", "--set", f"storage={tmp_path / 'runs'}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Table t_plan:") and "measured on cpu: ms " in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ray").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    assert main([str(tmp_path / "missing.yaml"), "--plan"]) == 2


# ------------------------------------------------------------------ the bill's run counts against the stages' runs


def _sampled(spec: StudySpec, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` points as the search asks them: the spec's own sampler over its define-by-run space, in memory."""
    import optuna

    from study.search.space import make_sampler, to_optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler(spec.search.sampler, spec.search.space), direction="maximize")
    space, rng, points = to_optuna(spec.search.space), random.Random(seed), []
    for _ in range(n):
        trial = study.ask()
        space(trial)
        points.append(dict(trial.params))
        study.tell(trial, rng.random())
    return points


def _search_results(plan: StudyPlan, epochs_of: list[int] | None = None) -> list[Any]:
    """Every cell's search trials as Ray hands them to the stages: each config its cell's stamp and its sampled values,
    each a random objective; ``epochs_of`` the epochs each of a cell's trials trained (default: all)."""
    from ray.tune import Result

    rng, results = random.Random(1), []
    for c, cell in enumerate(plan.cells):
        for i, params in enumerate(_sampled(cell.spec, plan.trials_per_cell, c)):
            epoch = plan.base.train.epochs if epochs_of is None else epochs_of[i]
            config = {CELL_KEY: cell.label, **params}
            metrics = {plan.base.search.objective: rng.random(), EPOCH: epoch, "config": config}
            results.append(Result(metrics=metrics, checkpoint=None, error=None, path=f"/x/trial_{c}_{i}"))
    return results


def _stage_runs(plan: StudyPlan, results: list[Any]) -> tuple[int, int]:
    """The final and race runs the stages make of ``results``: their own functions on them (the points each stage's
    Tuner runs), grouped as the stages group (``study.search.stages``: by cell where groups are cells)."""
    spec = plan.base
    group = plan.group if plan.groups_are_cells else None
    order = {result_trial_id(r): i for i, r in enumerate(results)}
    finals = final_points(spec, best_per_group(spec, results, order, group))
    race = spec.final.race
    if race is None:
        return len(finals), 0
    return len(finals), len(race_points(spec, top_per_group(spec, results, order, race.finalists, group), order))


def _yaml(name: str, *overrides: str) -> StudyPlan:
    return load_plan(SPACES / name, list(overrides))


def _study(**over: Any) -> StudyPlan:
    return StudyPlan.of_study(parse_spec(honest_spec(**over)))


def _tiny_raced_table() -> StudyPlan:
    table = tiny_table(
        "t", 2, 3, 3, 2, validation={"kind": "kfold", "folds": 2}, final={"seeds": 2, "race": {"finalists": 2}}
    )
    table["train"] = {**table["train"], "classes_per_batch": 2}
    return parse_table(table)


_EMBEDDING = {"model.embedding_dim": {"type": "int", "low": 32, "high": 96, "step": 32}}
_RANDOM_GROUPED = {
    "search": {
        **honest_spec()["search"],
        "num_trials": 24,
        "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}, **_EMBEDDING},
    },
    "final": {"seeds": 2, "group_by": ["model.embedding_dim"], "race": {"finalists": 2, "seeds": 1}},
}

RUN_COUNT_CASES = {
    "study": lambda: _study(),
    "grouped study (grid)": lambda: _yaml("bspml_compare_glyphs_reduced.yaml"),
    "grouped study (when: in group_by)": lambda: _yaml("robust_glyphs.yaml"),
    "grouped study (random, int group_by, raced)": lambda: _study(**_RANDOM_GROUPED),
    "table": lambda: _yaml("table_glyphs_quick.yaml"),
    "replicated table": lambda: parse_table(tiny_table("t", 2, 3, 3, 2, search={"num_trials": 3, "replicates": 2})),
    "replicated study": lambda: _study(search={**honest_spec()["search"], "replicates": 3}),
    "raced study": lambda: _study(final={"seeds": 2, "race": {"finalists": 2, "seeds": 3}}),
    "raced grouped study": lambda: _yaml(
        "bspml_compare_glyphs_reduced.yaml", "final.race.finalists=2", "final.race.seeds=2"
    ),
    "raced table": _tiny_raced_table,
}


@pytest.mark.parametrize("case", list(RUN_COUNT_CASES))
def test_the_bill_counts_the_final_and_race_runs_the_stages_make(case):
    plan = RUN_COUNT_CASES[case]()
    finals, race = _stage_runs(plan, _search_results(plan))
    assert (plan.final_runs, plan.race_runs) == (finals, race)
    assert finals > 0 and (race > 0) == (plan.base.final.race is not None)
    # The bill multiplies those counts: at 1 s a model-epoch on one slot, FIFO's hours are the model-epochs.
    bill = assumed_bill(list(plan.arms), 1.0, plan.search_cost())
    b = plan.base
    hand = ((plan.search_trials + race) * plan.search_cost() + finals) * b.train.epochs
    assert priced(plan).hours(bill, False) * 3600 * b.search.max_concurrent == pytest.approx(hand)
    assert model_epochs(plan, False) == pytest.approx(hand)
    assert f"= {finals} final runs" in size_line(plan, bill) and (not race or f"= {race} race runs" in size_line(plan))


def test_the_grouped_study_of_the_compare_page_is_billed_for_its_six_groups():
    plan = _yaml("bspml_compare_glyphs_reduced.yaml")
    # family × noise ratio = 3 × 2 groups, each retrained on 3 seeds; 12 search trials at 3/4 of the classes.
    assert (plan.groups_per_cell, plan.final_runs) == (6, 18)
    assert model_epochs(plan) == pytest.approx(12 * 0.75 * 3 + 18 * 3)  # 81, not 36
    raced = _yaml("bspml_compare_glyphs_reduced.yaml", "final.race.finalists=2", "final.race.seeds=2")
    assert raced.race_runs == 6 * 2 * 2 and model_epochs(raced) == pytest.approx(81 + 24 * 0.75 * 3)
    assert "6 groups (final.group_by) × 3 final seeds = 18 final runs" in size_line(plan)
    assert "2 finalists × 2 seeds per group = 24 race runs" in size_line(raced)


def test_group_count_is_the_distinct_group_by_values_the_space_reaches_at_most_one_per_trial():
    def count(space: dict, group_by: tuple[str, ...], trials: int = 100) -> int:
        return group_count(SearchSpec.model_validate({"num_trials": trials, "space": space}), group_by)

    cat = {"type": "categorical"}
    space = {
        "family": {**cat, "choices": ["ms", "bspml", "prism"]},
        "ratio": {**cat, "choices": [0.2, 0.25]},
        "kind": {**cat, "choices": ["uniform"], "when": {"ratio": [0.2]}},  # only at 0.2: 2 settings, not 2 × 2
        "weight": {**cat, "choices": [1.0, 0.0], "when": {"family": "prism"}},
        "lr": {"type": "float", "low": 1e-4, "high": 1e-3},
    }
    assert count(space, ()) == 1
    assert count(space, ("family", "ratio", "kind")) == 6
    assert count(space, ("kind",)) == 2  # uniform, or left out
    assert count(space, ("weight",)) == 3  # 1.0, 0.0, or left out (ms, bspml)
    assert count(space, ("family", "ratio", "kind"), trials=4) == 4  # a group needs a trial
    assert count(space, ("lr",), trials=7) == 7  # unbounded values: the trials bound the groups
    assert count({**space, "width": {"type": "int", "low": 32, "high": 96, "step": 32}}, ("width", "ratio")) == 6
    assert count({"s": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}}, ("s",)) == 5


def test_a_halving_cells_race_is_billed_for_the_trials_that_trained_every_epoch():
    raw = copy.deepcopy(QUICK)
    raw["final"] = {**raw["final"], "race": {"finalists": 2, "seeds": 1}}
    raw["search"] = {
        **raw["search"],
        "reproducible": False,
        "scheduler": {"type": "halving", "first_rung": 1, "reduction_factor": 2},
    }
    plan = parse_table(raw, "quick.yaml")
    # 4 trials, 4 epochs, rungs at epochs 1 and 2 at η 2: two stop at 1, one at 2, one trains all 4 epochs.
    finals, race = _stage_runs(plan, _search_results(plan, epochs_of=[1, 4, 2, 1]))
    assert (plan.final_runs, plan.race_runs) == (finals, race) == (4 * 2, 4 * 1 * 1)


def test_calibration_measures_a_family_searching_study_as_its_family_trial_runs():
    spec = _yaml("robust_glyphs.yaml").base  # family prism; params of ms, bspml and prism
    with pytest.raises(ValueError, match="unknown parameter params.lambda0 for family 'prism'"):
        get_rules(spec.family).parse_params(spec.params)
    trial = trial_of_family(spec)
    fixed = get_rules("prism").parse_params(trial.params)
    assert trial.family == "prism" and (fixed.memory_size, fixed.window_size) == (1024, 30)
    assert trial_of_family(_study().base) == _study().base  # no family searched: the spec as it is

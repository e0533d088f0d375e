"""The one "best configuration" rule (``study.final.best``) and the one t-interval (``study.final.intervals``), checked against
brute force and hand values, and the places that use them checked to agree on ties."""

from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from study.final.best import best_by_group, pick_best
from study.final.intervals import t_interval


def _brute_force(items, mode):
    """Best by value, then smallest id: the rule written as one sort key."""
    finite = [i for i in items if isinstance(i[1], float) and math.isfinite(i[1])]
    if not finite:
        return None
    sign = -1.0 if mode == "max" else 1.0
    return min(finite, key=lambda i: (sign * i[1], i[0]))


@pytest.mark.parametrize("mode", ["max", "min"])
def test_pick_best_matches_brute_force_under_every_order(mode):
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 6)
        # Few distinct values, so ties are frequent; NaN and inf never win.
        values = [rng.choice([0.1, 0.2, 0.2, 0.3, math.nan, math.inf]) for _ in range(n)]
        items = [(f"t_{i:05d}", v) for i, v in enumerate(values)]
        expected = _brute_force(items, mode)
        for order in itertools.islice(itertools.permutations(items), 24):
            assert pick_best(order, lambda i: i[1], lambda i: i[0], mode) == expected


def test_pick_best_skips_missing_and_non_numbers():
    items = [("a", None), ("b", "0.9"), ("c", True), ("d", 0.1)]
    assert pick_best(items, lambda i: i[1], lambda i: i[0], "max") == ("d", 0.1)
    assert pick_best([("a", None)], lambda i: i[1], lambda i: i[0], "max") is None


def test_best_by_group_picks_within_each_group_and_drops_empty_ones():
    items = [("g1", "t2", 0.5), ("g1", "t1", 0.5), ("g2", "t3", 0.4), ("g2", "t0", 0.3), ("g3", "t4", math.nan)]
    best = best_by_group(items, lambda i: i[0], lambda i: i[2], lambda i: i[1], "max")
    assert best == {"g1": ("g1", "t1", 0.5), "g2": ("g2", "t3", 0.4)}


def test_t_interval_against_scipy_and_by_hand():
    x = [0.61, 0.64, 0.58, 0.66]
    mean, std, low, high = t_interval(x)
    ref_low, ref_high = sps.t.interval(0.95, df=3, loc=np.mean(x), scale=sps.sem(x))
    assert (mean, std) == pytest.approx((np.mean(x), np.std(x, ddof=1)))
    assert (low, high) == pytest.approx((ref_low, ref_high))
    assert t_interval([2.0, 2.0, 2.0])[2:] == (2.0, 2.0)
    assert all(math.isnan(v) for v in t_interval([0.5])[1:])


def test_final_stage_status_and_dashboards_pick_the_same_trial_on_a_tie(tmp_path):
    """Three trials, two tied at the best value and handed over in reverse order: the final stage (Ray results),
    ``--status``'s Optuna rule and the dashboards' ``best_configs`` all pick the earlier trial (the smaller Optuna
    number; the smaller trial id where no number is recorded)."""
    from dashboards.load import DashboardData, StudyInfo
    from dashboards.select import best_configs
    from harness.driver import honest_spec
    from study.final.stage import best_result
    from study.intake.spec_reader import parse_spec

    spec = parse_spec(honest_spec())
    trials = [("abc_00002", 0.7, 2.0), ("abc_00001", 0.7, 1.0), ("abc_00000", 0.5, 3.0)]
    results = [
        SimpleNamespace(
            config={"spec": {}, "ms_alpha": a},
            metrics={spec.search.metric: v},
            error=None,
            path=str(tmp_path / f"trial_{t}"),
        )
        for t, v, a in trials
    ]
    grid = type("Grid", (), {"__len__": lambda self: len(results), "__getitem__": lambda self, i: results[i]})()
    assert best_result(spec, grid, {}).config["ms_alpha"] == 1.0  # no Optuna numbers: the smaller trial id
    numbers = {"abc_00002": 0, "abc_00001": 1, "abc_00000": 2}  # Ray's ids are random: Optuna's order decides
    assert best_result(spec, grid, numbers).config["ms_alpha"] == 2.0

    optuna_trials = [SimpleNamespace(number=int(t[-1]), value=v) for t, v, _ in trials]
    assert pick_best(optuna_trials, lambda t: t.value, lambda t: t.number, spec.search.mode).number == 1

    runs = pl.DataFrame(
        {
            "run_id": [f"r{t}" for t, _, _ in trials],
            "experiment": ["s"] * 3,
            "trial_id": [t for t, _, _ in trials],
            "status": ["FINISHED"] * 3,
            "start_time": [1, 2, 3],  # abc_00002 started first: the tie goes by trial id, not by start time
            "family": ["ms"] * 3,
            "dataset": ["digits"] * 3,
            "noise_kind": ["none"] * 3,
            "noise_ratio": [0.0] * 3,
            "subset": ["all"] * 3,
            "seed": ["0"] * 3,
            "stage": ["search"] * 3,
            "group": [""] * 3,
            "source_trial": [""] * 3,
            "config": [f'{{"ms_alpha": {a}}}' for _, _, a in trials],
            "m/" + spec.search.metric: [v for _, v, _ in trials],
        }
    )
    info = StudyInfo("s", "1", None, None, None, spec.search.metric, spec.search.mode, 3, {}, None)
    empty = pl.DataFrame()
    data = DashboardData("sqlite:///x", [info], runs, empty, empty, empty)
    table = best_configs(data, runs=runs)
    assert table["trial_ids"].to_list() == [["abc_00001"]] and table["best_trial_id"].to_list() == ["abc_00001"]
    numbered = runs.with_columns(pl.Series("optuna_trial_number", [str(numbers[t]) for t, _, _ in trials]))
    table = best_configs(data, runs=numbered)
    assert table["best_trial_id"].to_list() == ["abc_00002"]


def test_status_names_the_earliest_of_tied_trials(tmp_path, spec_dict, write_spec):
    """``--status`` reads Optuna: two trials tie at the best value, the earlier (smaller number) is the best, as in
    the final stage."""
    import optuna
    import yaml

    from study.cell_status import cells_status
    from study.intake.plan import StudyPlan
    from study.intake.spec_reader import load_spec

    spec_dict["storage"] = str(tmp_path / "runs")
    spec_path = write_spec(spec_dict)
    root = tmp_path / "runs" / spec_dict["name"]
    root.mkdir(parents=True)
    (root / "spec.yaml").write_text(yaml.safe_dump(spec_dict))
    study = optuna.create_study(study_name=spec_dict["name"], storage=f"sqlite:///{root}/optuna.db")
    for value in (0.5, 0.75, 0.75, 0.25):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=value))
    spec = load_spec(str(spec_path), [], family_rules=False)
    (best,) = cells_status(StudyPlan.of_study(spec))  # a study's one cell
    expected = 1 if spec.search.mode == "max" else 3
    assert best.best_number == expected


def test_the_printed_best_is_the_final_stages_pick_per_replicate(tmp_path):
    """Issue 59 part 0: the console's best, the parent's ``best_trial_id``, and the final stage name one trial per
    cell. A trial a scheduler stopped at an early rung (epoch 1) with the highest value is not it, and a replicate's
    better winner is that replicate's, not the study's."""
    from harness.driver import honest_spec
    from study.final.stage import best_per_cell, best_per_group, best_result
    from study.intake.spec_reader import parse_spec
    from trainables.schema.metric_names import EPOCH
    from trainables.schema.trial import CELL_KEY

    spec = parse_spec(honest_spec())
    full = spec.train.epochs
    trials = [  # (trial id, cell, value, epochs trained)
        ("t0", spec.name, 0.95, 1),  # stopped at the first rung: its last value is an earlier epoch's
        ("t1", spec.name, 0.70, full),
        ("t2", spec.name, 0.80, full),
        ("t3", f"{spec.name}.r1", 0.90, full),  # replicate 1's winner: better than replicate 0's, not the study's
        ("t4", f"{spec.name}.r1", 0.60, full),
    ]
    results = [
        SimpleNamespace(
            config={"spec": {}, CELL_KEY: cell},
            metrics={spec.search.metric: v, EPOCH: e},
            error=None,
            path=f"x/trial_{t}",
        )
        for t, cell, v, e in trials
    ]
    picked = {cell: r.path[-2:] for cell, r in best_per_cell(spec, results, {}).items()}
    assert picked == {spec.name: "t2", f"{spec.name}.r1": "t3"}
    assert best_result(spec, results, {}).path.endswith("t2")
    final = best_per_group(spec, results, {}, group=lambda config: config[CELL_KEY])  # what the final stage retrains
    assert {cell: r.path[-2:] for cell, r in final.items()} == picked
    unstamped = [SimpleNamespace(**{**vars(r), "config": {"spec": {}}}) for r in results[:3]]
    assert best_result(spec, unstamped, {}).path.endswith("t2")  # a trial without a cell stamp is the study's own


def test_an_interval_on_a_bounded_metric_stays_in_its_bounds(capsys):
    """Issue 59 part 0: Recall@1, MAP@R and NMI are shares; their intervals are cut to [0, 1], and a final stage of 1
    or 2 seeds is said to give no interval or one that says nothing."""
    from harness.driver import honest_spec
    from study.commands.run import _warn_selection
    from study.final.intervals import few_seeds_warning, replicated_mean, t_interval
    from study.intake.spec_reader import parse_spec
    from trainables.schema.metric_names import bounds_of

    assert [bounds_of(n) for n in ("test/recall_at_1", "val/recall_at_4", "category/a b/map_at_r", "train/loss")] == [
        (0.0, 1.0),
        (0.0, 1.0),
        (0.0, 1.0),
        None,
    ]
    near_one = [0.99, 1.0, 0.96]
    _, _, low, high = t_interval(near_one)
    assert high > 1.0  # the plain t-interval claims a Recall@1 above 1
    assert t_interval(near_one, (0.0, 1.0))[2:] == (low, 1.0)
    pooled = replicated_mean([{0: 0.99, 1: 1.0, 2: 0.96}, {0: 1.0, 1: 0.97, 2: 0.99}], (0.0, 1.0))
    assert pooled is not None and pooled[2] == 1.0 and pooled[1] < pooled[0]
    assert few_seeds_warning(3) is None and few_seeds_warning(0) is None
    for seeds, says in ((1, "reports no interval"), (2, "1 degree of freedom (t = 12.7")):
        spec = parse_spec({**honest_spec(), "final": {"seeds": seeds}})
        _warn_selection(spec)
        assert f"warning: final.seeds is {seeds}: " in (err := capsys.readouterr().err) and says in err, err

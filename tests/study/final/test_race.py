"""The finalist race (``final.race``, issue 59 part 3), without Ray: its finalists are the first of the final stage's
own ranking, its points and standings are checked by hand, the spec refuses a race that cannot run in one line, and
the plan and its bill count the race's runs."""

from __future__ import annotations

import random

import pytest
from ray.tune import Result

from harness.driver import honest_spec, tiny_table
from study.bill import assumed_bill, model_epochs, priced, size_line
from study.final.best import best_full_trial, ranked_full_trials
from study.final.race import race_csv, race_key, race_points, standings, undecided_note
from study.final.stage import result_trial_id
from study.intake.cells import parse_table
from study.intake.plan import StudyPlan
from study.intake.spec_reader import parse_spec
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.trial import RACE_KEY

OBJECTIVE = "val/recall_at_1"
EPOCHS = 2  # honest_spec's


def _spec(race: dict | None = None, **final: object):
    raw = honest_spec()
    return parse_spec({**raw, "final": {**raw["final"], **final, **({"race": race} if race else {})}})


def _result(trial: str, metrics: dict, config: dict, error: Exception | None = None) -> Result:
    """A Ray result as Tune hands it over: its config inside its metrics, its directory ``trial_<id>``."""
    return Result(metrics={**metrics, "config": config}, checkpoint=None, error=error, path=f"/x/trial_{trial}")


def test_the_ranking_starts_with_the_final_stages_pick_on_ties_and_stopped_trials():
    rng = random.Random(0)
    for _ in range(200):
        candidates = [(i, rng.choice([0.1, 0.2, 0.3, float("nan")]), rng.random() < 0.7) for i in range(6)]
        ranked = ranked_full_trials(candidates, lambda c: c[1], lambda c: c[2], lambda c: c[0], "max")
        assert (ranked[0] if ranked else None) == best_full_trial(
            candidates, lambda c: c[1], lambda c: c[2], lambda c: c[0], "max"
        )
        values = [c[1] for c in ranked]
        assert values == sorted(values, reverse=True)  # best first; within a value the earlier trial first
        assert all(a[0] < b[0] for a, b in zip(ranked, ranked[1:]) if a[1] == b[1])


def test_points_are_each_finalists_values_with_the_next_seeds_and_its_optuna_number():
    spec = _spec({"finalists": 2, "seeds": 2})
    a, b = (
        _result("a", {OBJECTIVE: 0.5}, {"ms_alpha": 1.5}),
        _result("b", {OBJECTIVE: 0.4}, {"ms_alpha": 2.5, "seed": 7}),
    )
    points = race_points(spec, {"all": [a, b]}, {"a": 3, "b": 5})
    assert [race_key(p) for p in points] == [("all", "a", 1), ("all", "a", 2), ("all", "b", 8), ("all", "b", 9)]
    assert points[0] == {R.GROUP: "all", R.SOURCE_TRIAL: "a", "number": 3, "params": {"ms_alpha": 1.5, "seed": 1}}


def test_the_winner_has_the_best_mean_of_its_search_and_race_values():
    spec = _spec({"finalists": 2, "seeds": 2})
    a, b = _result("a", {OBJECTIVE: 0.50}, {"ms_alpha": 1.5}), _result("b", {OBJECTIVE: 0.48}, {"ms_alpha": 2.5})
    finalists = {"all": [a, b]}
    order = {"a": 0, "b": 1}
    points = {race_key(p): p for p in race_points(spec, finalists, order)}

    def race(trial: str, seed: int, value: float, epoch: int = EPOCHS, error: Exception | None = None) -> Result:
        return _result(
            f"r{trial}{seed}", {OBJECTIVE: value, "epoch": epoch}, {RACE_KEY: points["all", trial, seed]}, error
        )

    # a: 0.50, 0.40, 0.42 → mean 0.44; b: 0.48, 0.47, 0.49 → 0.48, and b's failed and short runs do not count.
    runs = [race("a", 1, 0.40), race("a", 2, 0.42), race("b", 1, 0.47), race("b", 2, 0.49)]
    runs += [race("b", 1, 0.0, error=RuntimeError("x")), race("b", 2, 0.0, epoch=1)]
    winners, table = standings(spec, finalists, runs, order)
    assert winners == {"all": b}
    assert [(s.source_trial, s.race_values, s.winner) for s in table] == [
        ("a", (0.40, 0.42), False),
        ("b", (0.47, 0.49), True),
    ]
    assert table[1].mean == pytest.approx(0.48) and table[0].mean == pytest.approx(0.44)
    csv = race_csv(table).splitlines()
    assert csv[0] == "group,source_trial,optuna_number,search_value,race_values,race_missing,race_mean,winner"
    assert csv[2].startswith('"all",b,1,0.48,0.47 0.49,0,') and csv[2].endswith(",true")
    # Equal means: the earlier search trial (its Optuna number) wins, as the final stage breaks ties.
    tied = [race("a", 1, 0.50), race("a", 2, 0.50), race("b", 1, 0.51), race("b", 2, 0.51)]
    assert standings(spec, {"all": [b, a]}, tied, {"a": 0, "b": 1})[0] == {"all": a}


def _race_of(spec, finalists, order):
    """A maker of race results for ``finalists``' points: ``run(trial, seed, value, epoch, error)``."""
    points = {race_key(p): p for p in race_points(spec, finalists, order)}

    def run(trial: str, seed: int, value: float, epoch: int = EPOCHS, error: Exception | None = None) -> Result:
        config = {RACE_KEY: points["all", trial, seed]}
        return _result(f"r{trial}{seed}", {OBJECTIVE: value, "epoch": epoch}, config, error)

    return run


def test_a_finalist_whose_race_runs_all_fail_does_not_win_on_its_search_value():
    """aaa: search 0.70 (the cell's best by construction), both race runs diverged; bbb: search 0.66, race 0.65 and
    0.65. Counting aaa's search value alone (mean 0.70) would crown the configuration that fails."""
    spec = _spec({"finalists": 2, "seeds": 2})
    aaa, bbb = _result("aaa", {OBJECTIVE: 0.70}, {"ms_alpha": 1.5}), _result("bbb", {OBJECTIVE: 0.66}, {"ms_alpha": 2})
    finalists, order = {"all": [aaa, bbb]}, {"aaa": 0, "bbb": 1}
    run = _race_of(spec, finalists, order)
    nan = float("nan")
    runs = [run("aaa", 1, nan, error=RuntimeError("loss is nan")), run("aaa", 2, nan, epoch=1)]
    runs += [run("bbb", 1, 0.65), run("bbb", 2, 0.65)]
    winners, table = standings(spec, finalists, runs, order)
    assert winners == {"all": bbb}
    assert [(s.source_trial, s.race_values, s.missing, s.winner) for s in table] == [
        ("aaa", (), 2, False),
        ("bbb", (0.65, 0.65), 0, True),
    ]
    assert race_csv(table).splitlines()[1].startswith('"all",aaa,0,0.7,,2,0.7,false')
    assert undecided_note(table) == ""  # an eligible finalist won: the race decided


def test_one_failed_race_run_counts_against_a_finalist_with_the_better_mean():
    """aaa: 0.70, race 0.69 and a run stopped at epoch 1 (mean 0.695); bbb: 0.60, 0.60, 0.60. bbb finished every
    race run, aaa did not: bbb wins. A finite value reported before the last epoch is a short run too."""
    spec = _spec({"finalists": 2, "seeds": 2})
    aaa, bbb = _result("aaa", {OBJECTIVE: 0.70}, {"ms_alpha": 1.5}), _result("bbb", {OBJECTIVE: 0.60}, {"ms_alpha": 2})
    finalists, order = {"all": [aaa, bbb]}, {"aaa": 0, "bbb": 1}
    run = _race_of(spec, finalists, order)
    runs = [run("aaa", 1, 0.69), run("aaa", 2, 0.71, epoch=1), run("bbb", 1, 0.60), run("bbb", 2, 0.60)]
    winners, table = standings(spec, finalists, runs, order)
    assert winners == {"all": bbb}
    assert [(s.missing, s.planned, s.eligible) for s in table] == [(1, 2, False), (0, 2, True)]
    assert table[0].mean == pytest.approx(0.695)


def test_when_no_finalist_is_eligible_the_fewest_missing_wins_and_the_standings_say_so():
    spec = _spec({"finalists": 2, "seeds": 2})
    aaa, bbb = _result("aaa", {OBJECTIVE: 0.70}, {"ms_alpha": 1.5}), _result("bbb", {OBJECTIVE: 0.66}, {"ms_alpha": 2})
    finalists, order = {"all": [aaa, bbb]}, {"aaa": 0, "bbb": 1}
    run = _race_of(spec, finalists, order)
    failed = RuntimeError("x")
    # bbb lost one run, aaa both: bbb (fewest missing) wins, on its mean.
    one = [run("aaa", 1, 0.0, error=failed), run("aaa", 2, 0.0, error=failed), run("bbb", 1, 0.5)]
    winners, table = standings(spec, finalists, one, order)
    assert winners == {"all": bbb}
    assert (
        undecided_note(table)
        == "no finalist finished every race run: trial 1, with the fewest missing (1 of 2), won on its mean"
    )
    # Every race run failed (the race could not run at all): the best search value, said as such.
    none = [run(t, seed, 0.0, error=failed) for t in ("aaa", "bbb") for seed in (1, 2)]
    winners, table = standings(spec, finalists, none, order)
    assert winners == {"all": aaa}
    assert [(s.missing, s.winner) for s in table] == [(2, True), (2, False)]
    assert undecided_note(table).endswith("trial 0, with the fewest missing (2 of 2), won on its search value alone")


def test_the_winner_is_the_best_mean_among_the_finalists_with_the_fewest_race_runs_missing():
    """Random races against a brute-force reading of the rule: per finalist, its seeds that finished every epoch with
    a finite value (any other result of a seed is missing); among those with the fewest missing, the best mean of
    search and race values, ties to the earlier trial."""
    rng = random.Random(65)
    spec = _spec({"finalists": 2, "seeds": 3})
    nan = float("nan")
    for _ in range(300):
        names = [f"t{i}" for i in range(rng.randint(1, 4))]
        order = dict(zip(names, rng.sample(range(10), len(names))))
        finalists = {"all": [_result(n, {OBJECTIVE: rng.choice([0.5, 0.6, 0.7])}, {"ms_alpha": 1.0}) for n in names]}
        run = _race_of(spec, finalists, order)
        runs, finished = [], {n: [] for n in names}
        for n in names:
            for seed in range(1, 4):
                kind = rng.choice(["ok", "ok", "ok", "error", "short", "nan", "absent"])
                value = rng.choice([0.5, 0.6, 0.7])
                if kind == "ok":
                    finished[n].append(value)
                if kind != "absent":
                    error = RuntimeError("x") if kind == "error" else None
                    runs.append(run(n, seed, nan if kind == "nan" else value, 1 if kind == "short" else EPOCHS, error))
        rng.shuffle(runs)
        search = {r.path.rsplit("_", 1)[1]: r.metrics[OBJECTIVE] for r in finalists["all"]}
        missing = {n: 3 - len(finished[n]) for n in names}
        mean = {n: sum([search[n], *finished[n]]) / (1 + len(finished[n])) for n in names}
        expected = min(names, key=lambda n: (missing[n], -mean[n], order[n]))
        winners, table = standings(spec, finalists, runs, order)
        assert result_trial_id(winners["all"]) == expected
        assert {s.source_trial: s.missing for s in table} == missing
        assert [s.source_trial for s in table if s.winner] == [expected]


@pytest.mark.parametrize(
    ("race", "final", "needle"),
    [
        ({"finalists": 1}, {}, "final.race.finalists"),
        ({"finalists": 3}, {}, "exceeds search.num_trials 2"),
        ({"seeds": 0}, {}, "final.race.seeds"),
        ({"finalists": 2}, {"seeds": 0}, "needs final.seeds >= 1"),
    ],
)
def test_a_race_that_cannot_run_is_one_line(race, final, needle):
    with pytest.raises(SpecError) as e:
        _spec(race, **final)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_race_without_validation_classes_is_refused_for_a_study_and_a_table():
    raw = {**honest_spec(), "validation": {"kind": "none"}, "final": {"seeds": 1, "race": {"finalists": 2}}}
    with pytest.raises(SpecError, match="needs validation.kind kfold or holdout"):
        parse_spec(raw)
    with pytest.raises(SpecError, match="needs validation.kind kfold or holdout"):
        parse_table(tiny_table("t", 2, 3, 2, 1, final={"seeds": 1, "race": {"finalists": 2}}))


def test_the_plan_and_its_bill_count_the_race_as_search_trials_before_the_final_seeds():
    plain, raced = StudyPlan.of_study(_spec()), StudyPlan.of_study(_spec({"finalists": 2, "seeds": 3}))
    assert (plain.race_runs, raced.race_runs, raced.race_per_cell) == (0, 6, 6)
    per_trial = raced.search_cost() * EPOCHS  # a race run is a search trial: 1 fold-model-epoch × 2 folds … each epoch
    assert model_epochs(raced) == pytest.approx(model_epochs(plain) + 6 * per_trial)
    bill = assumed_bill(list(raced.arms), 3.0, raced.search_cost())
    race_h = 6 * bill.trial_s(raced.cells[0].arm, EPOCHS) / raced.base.search.max_concurrent / 3600
    assert priced(raced).hours(bill) == pytest.approx(priced(plain).hours(bill) + race_h)
    assert "a race of 2 finalists × 3 seeds per cell = 6 race runs (validation only), then" in size_line(raced)
    # A table's cells wait for the race before their final seeds (no final seeds inside the search).
    table = tiny_table(
        "t", 2, 3, 2, 1, validation={"kind": "kfold", "folds": 2}, final={"seeds": 1, "race": {"finalists": 2}}
    )
    table["train"] = {**table["train"], "classes_per_batch": 2}
    plan = parse_table(table)
    assert plan.race_runs == 2 * 2 * 2 and not plan.final_with_search
    assert "race" not in parse_table({**table, "final": {"seeds": 1}}).written["final"]  # dumped only when set


def test_the_standings_print_one_line_per_group_with_the_retrained_finalist_marked():
    from study.final.race import Standing, standing_lines

    table = [
        Standing("ms.p0.2", "a", 3, 0.5, (0.4, 0.42), winner=False),
        Standing("ms.p0.2", "b", 5, 0.48, (0.47, 0.49), winner=True),
        Standing("t", "c", None, 0.3, (), winner=True),
    ]
    lines = standing_lines(table, "t")
    assert lines[0].startswith("race: each group's finalists retrained on 2 more seeds (validation only)")
    assert lines[1] == (
        "  ms.p0.2: trial 3 0.4400 [search 0.5000; race 0.4000, 0.4200]; "
        "trial 5 0.4800 (retrained) [search 0.4800; race 0.4700, 0.4900]"
    )
    assert lines[2] == "  t: trial c 0.3000 (retrained) [search 0.3000; race none finished]"
    assert standing_lines([], "t") == []

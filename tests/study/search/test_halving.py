"""Synchronous successive halving per cell (issue 50): the rule against brute force, the scheduler's decisions the same
in every arrival order (the property asynchronous ASHA lacks), the same after a driver restart mid-rung, nothing
deadlocked while paused trials wait, every stopped trial told to the searcher, and the cost share against a count.
No Ray cluster: the scheduler is driven by a small model of Ray Tune's loop (a real ``ConcurrencyLimiter`` around a
fake searcher, PAUSE/stop/choose_trial_to_run as ``TuneController`` does them)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from study.intake.asha_cost import halving_share
from study.search.halving import HalvingRule, HalvingScheduler, halving_rungs, kept_at_rung, kept_count
from trainables.schema.trial import CELL_KEY

CELLS = [("ms.p0", {"family": "ms", "ratio": 0.0}), ("ms.p0.4", {"family": "ms", "ratio": 0.4})]
MAX_T, FIRST, ETA, BUDGET = 8, 1, 2.0, 5  # rungs at 1, 2, 4: 5 → 3 → 2 → 1 per cell


def _key(value, mode, order, t):
    bad = value is None or not math.isfinite(value)
    return (bad, 0.0 if bad else (-value if mode == "max" else value), order[t], t)


@pytest.mark.parametrize("seed", range(40))
def test_kept_at_rung_equals_brute_force(seed):
    """Kept ⇔ fewer than quota trials beat it (better value, or equal value and asked earlier); NaN/None rank last."""
    rng = random.Random(seed)
    n, mode, eta, hedge = rng.randint(0, 9), rng.choice(["max", "min"]), rng.choice([2.0, 3.0, 2.5]), rng.randint(0, 4)
    ids = [f"t{i}" for i in range(n)]
    values = {t: rng.choice([0.1, 0.2, 0.3, None, float("nan"), round(rng.random(), 1)]) for t in ids}
    order = dict(zip(ids, rng.sample(range(100), n)))
    quota = min(n, max(math.ceil(n / eta), min(hedge, n)))
    keys = {t: _key(values[t], mode, order, t) for t in ids}
    brute = {t for t in ids if sum(keys[u] < keys[t] for u in ids) < quota}
    assert kept_at_rung(values, mode=mode, eta=eta, hedge=hedge, order=order) == brute
    shuffled = dict(rng.sample(sorted(values.items()), n))  # the mapping's order plays no part
    assert kept_at_rung(shuffled, mode=mode, eta=eta, hedge=hedge, order=order) == brute


def test_rungs_and_counts():
    assert halving_rungs(8, 1, 2) == [1, 2, 4]
    assert halving_rungs(60, 5, 3) == [5, 15, 45]
    assert halving_rungs(7, 2, 1.5) == [2, 3, 5]  # ⌈2·1.5^k⌉: 2, 3, 4.5 → 5
    assert [kept_count(n, 2) for n in range(6)] == [0, 1, 1, 2, 2, 3]
    assert kept_count(16, 4, hedge=6) == 6 and kept_count(3, 4, hedge=6) == 3


@pytest.mark.parametrize(("epochs", "first", "eta", "n", "hedge"), [(60, 8, 2, 16, 0), (7, 1, 2, 8, 0), (7, 1, 3, 8, 2),
                                                                     (60, 5, 3, 16, 1), (9, 2, 1.5, 5, 0)])  # fmt: skip
def test_halving_share_equals_a_count_of_a_run(epochs, first, eta, n, hedge):
    """The arithmetic against epochs counted trial by trial on the scheduler's own decisions."""
    rungs = halving_rungs(epochs, first, eta)
    rng, alive, trained = random.Random(0), [f"t{i}" for i in range(n)], {}
    for rung in rungs:
        kept = kept_at_rung({t: rng.random() for t in alive}, mode="max", eta=eta, hedge=hedge)
        trained.update({t: rung for t in alive if t not in kept})
        alive = sorted(kept)
    trained.update({t: epochs for t in alive})
    assert halving_share(epochs, first, eta, n, hedge) == pytest.approx(sum(trained.values()) / (n * epochs))
    assert halving_share(60, 8, 2, 16) == pytest.approx(0.325)  # rungs 8, 16, 32: 16 → 8 → 4 → 2, ≈ 1/3 of FIFO


# ------------------------------------------------------------------------------------------ a model of Ray's loop


class FakeTrial:
    def __init__(self, trial_id: str, config: dict) -> None:
        self.trial_id, self.config, self.status = trial_id, config, Trial.PENDING
        self.epoch, self.last_result = 0, {}

    def set_status(self, status: str) -> None:
        self.status = status


class FakeSearcher(Searcher):
    """Gives the table's trials in ask order (the cells alternate), records how each ended."""

    def __init__(self, configs: list[dict]) -> None:
        super().__init__(metric="val", mode="max")
        self.configs, self.told = list(configs), {}

    def suggest(self, trial_id):
        return self.configs.pop(0) if self.configs else None

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.told[trial_id] = result


class Loop:
    """Ray Tune's loop, reduced: ask while the limiter lets, start the scheduler's choice and PENDING trials while a
    slot is free, advance a random running trial one epoch and act on the decision (PAUSE, STOP, CONTINUE)."""

    def __init__(self, scheduler, values, seed, slots=2, limiter=None, trials=None) -> None:
        self.scheduler, self.values, self.rng, self.slots = scheduler, values, random.Random(seed), slots
        configs = [
            {**CELLS[cell][1], CELL_KEY: CELLS[cell][0], "i": i} for i in range(BUDGET) for cell in range(len(CELLS))
        ]
        self.search_alg = type("SG", (), {})()
        self.search_alg.searcher = limiter or ConcurrencyLimiter(FakeSearcher(configs), max_concurrent=slots)
        self.trials: list[FakeTrial] = trials or []
        self.arrivals: list[tuple[str, int]] = []

    @property
    def searcher(self) -> FakeSearcher:
        return self.search_alg.searcher.searcher

    def get_trials(self):
        return list(self.trials)

    def stop_trial(self, trial):
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self, trial)
            self.search_alg.searcher.on_trial_complete(trial.trial_id)
        elif trial.status == Trial.RUNNING:
            self.scheduler.on_trial_complete(self, trial, trial.last_result)
            self.search_alg.searcher.on_trial_complete(trial.trial_id, result=trial.last_result)
        trial.status = Trial.TERMINATED

    def step(self) -> bool:
        while (config := self.search_alg.searcher.suggest(trial_id := f"t{len(self.trials):02d}")) is not None:
            trial = FakeTrial(trial_id, config)
            self.trials.append(trial)
            self.scheduler.on_trial_add(self, trial)
        chosen = self.scheduler.choose_trial_to_run(self)
        running = [t for t in self.trials if t.status == Trial.RUNNING]
        for trial in [chosen] if chosen is not None else []:
            if len(running) < self.slots:
                trial.status = Trial.RUNNING
                running.append(trial)
        for trial in self.trials:  # Ray starts every PENDING trial that resources allow
            if trial.status == Trial.PENDING and len(running) < self.slots:
                trial.status = Trial.RUNNING
                running.append(trial)
        if not running:
            return False
        trial = self.rng.choice(running)
        trial.epoch += 1
        result = {
            "training_iteration": trial.epoch,
            "val": self.values[trial.config["i"], trial.config["ratio"]][trial.epoch],
        }
        trial.last_result = result
        decision = self.scheduler.on_trial_result(self, trial, result)
        if decision == TrialScheduler.STOP:
            self.stop_trial(trial)
        elif decision == TrialScheduler.PAUSE:
            self.arrivals.append((trial.trial_id, trial.epoch))
            trial.status = Trial.PAUSED
        else:
            if trial.epoch in halving_rungs(MAX_T, FIRST, ETA):
                self.arrivals.append((trial.trial_id, trial.epoch))
            if trial.epoch == MAX_T:
                trial.status = Trial.TERMINATED
                self.scheduler.on_trial_complete(self, trial, result)
                self.search_alg.searcher.on_trial_complete(trial.trial_id, result=result)
        return True

    def run(self, max_steps: int = 2000, stop_at: int | None = None) -> None:
        for n in range(max_steps):
            if stop_at is not None and n >= stop_at:
                return
            if not self.step():
                live = [t.trial_id for t in self.trials if t.status not in (Trial.TERMINATED, Trial.ERROR)]
                assert not live, f"deadlock: {live} live, none runs"
                return
        raise AssertionError("the loop did not end")


def _values(seed: int = 7) -> dict[tuple[int, float], dict[int, float]]:
    """A value per trial and epoch: 0.01 steps so ties happen; trial 3's epoch 2 is NaN (ranks last)."""
    rng = random.Random(seed)
    out = {}
    for i, ratio in itertools.product(range(BUDGET), (0.0, 0.4)):
        base = rng.choice([0.3, 0.4, 0.5, 0.6])
        out[i, ratio] = {e: round(base + 0.01 * rng.randint(0, 3) * e, 2) for e in range(1, MAX_T + 1)}
    out[3, 0.0][2] = float("nan")
    return out


def _scheduler(path) -> HalvingScheduler:
    rule = HalvingRule(budget=BUDGET, metric="val", mode="max", max_t=MAX_T, first_rung=FIRST, reduction_factor=ETA)
    return HalvingScheduler(CELLS, rule, str(path))


def _outcome(loop: Loop) -> dict:
    return {
        "decisions": {label: [sorted(k) for k in kept] for label, kept in loop.scheduler.decisions().items()},
        "epochs": {t.trial_id: t.epoch for t in loop.trials},
    }


def test_every_arrival_order_keeps_the_same_trials(tmp_path):
    """40 runs of the same 10 trials (2 cells × 5) and values, arrivals shuffled by which trial advances and by 2-4
    slots: every run keeps the same trials at every rung (5 → 3 → 2 → 1 a cell), trains the same epochs, tells the
    searcher of every trial (a stopped one with no result: Optuna's PRUNED takes its value at the rung), and ends."""
    values, outcomes, orders = _values(), [], set()
    for seed in range(40):
        loop = Loop(_scheduler(tmp_path / f"s{seed}.json"), values, seed, slots=2 + seed % 3)
        loop.run()
        outcomes.append(_outcome(loop))
        orders.add(tuple(loop.arrivals))
        assert set(loop.searcher.told) == {t.trial_id for t in loop.trials}
    assert len(orders) >= 35, "the arrival orders hardly differed"
    assert all(o == outcomes[0] for o in outcomes)
    sizes = {label: [len(k) for k in kept] for label, kept in outcomes[0]["decisions"].items()}
    assert sizes == {"ms.p0": [3, 2, 1], "ms.p0.4": [3, 2, 1]}
    trained = sorted(outcomes[0]["epochs"].values())
    assert trained == sorted([1, 1, 2, 4, 8] * 2)
    assert "t06" not in outcomes[0]["decisions"]["ms.p0"][1]  # trial i=3 of ms.p0: NaN at epoch 2 ranks last
    example = {"values_at_rungs": loop.scheduler.rung_values(), **outcomes[0], "arrivals_two_runs": sorted(orders)[:2]}
    print(json.dumps(example, default=str, indent=None)[:3000])


def test_a_restart_mid_rung_decides_the_same(tmp_path):
    """The driver dies while trials wait at a barrier; a scheduler rebuilt empty (Ray's pickle from the start) reads
    the state file, Ray restores the unfinished trials PENDING: those waiting stay PAUSED, and every decision and
    epoch equals the uninterrupted run's."""
    values = _values()
    straight = Loop(_scheduler(tmp_path / "straight.json"), values, seed=3)
    straight.run()

    first = Loop(_scheduler(tmp_path / "state.json"), values, seed=3)
    first.run(stop_at=25)
    waiting = {t.trial_id for t in first.trials if t.status == Trial.PAUSED}
    assert waiting, "no trial waited at a barrier at the kill point"
    restored_scheduler = _scheduler(tmp_path / "state.json")  # empty rungs, as Tuner.restore rebuilds it
    for trial in first.trials:  # Ray's _requeue_restored_trials: unfinished → PENDING, then add_trial
        if trial.status != Trial.TERMINATED:
            trial.status = Trial.PENDING
    resumed = Loop(restored_scheduler, values, seed=3, limiter=first.search_alg.searcher, trials=first.trials)
    for trial in first.trials:
        restored_scheduler.on_trial_add(resumed, trial)
    assert {t.trial_id for t in first.trials if t.status == Trial.PAUSED} == waiting
    resumed.run()
    assert _outcome(resumed) == _outcome(straight)


def test_errors_leave_the_population(tmp_path):
    """A cell's trial errors before rung 0: the rung is decided on the 4 left (4 → 2), no wait for the lost one."""
    values = _values()
    loop = Loop(_scheduler(tmp_path / "s.json"), values, seed=1, slots=2)
    while not any(t.config["i"] == 1 and t.config["ratio"] == 0.0 for t in loop.trials):
        loop.step()
    lost = next(t for t in loop.trials if t.config["i"] == 1 and t.config["ratio"] == 0.0)
    assert lost.status in (Trial.PENDING, Trial.RUNNING) and lost.epoch == 0
    lost.status = Trial.ERROR
    loop.scheduler.on_trial_error(loop, lost)
    loop.search_alg.searcher.on_trial_complete(lost.trial_id, error=True)
    loop.run()
    sizes = {label: [len(k) for k in kept] for label, kept in loop.scheduler.decisions().items()}
    assert sizes == {"ms.p0": [2, 1, 1], "ms.p0.4": [3, 2, 1]}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["search.scheduler.first_rung=0"], "search.scheduler.first_rung"),
        (["search.scheduler.first_rung=4"], "first_rung 4 must be below train.epochs 4"),
        (["search.scheduler.hedge=4"], "hedge 4 must be below search.num_trials 4"),
        (["search.scheduler.grace_period=2"], "scheduler.grace_period applies to asha only"),
    ],
)
def test_bad_halving_settings_are_one_line_naming_the_key(sets, message):
    from study.intake.load import load_plan
    from trainables.schema.errors import SpecError

    base = ["search.scheduler.type=halving"]
    with pytest.raises(SpecError, match=message) as info:
        load_plan(Path(__file__).resolve().parents[3] / "search_spaces" / "table_glyphs_quick.yaml", base + sets)
    assert "\n" not in str(info.value)


def test_a_halving_table_builds_its_scheduler_and_dumps_its_keys(tmp_path):
    """cell_scheduler builds the scheduler from the table's plan; fifo and asha dump no halving key (a resumed study or table
    started before halving reads the same), halving dumps both."""
    from study.intake.layout import StudyLayout
    from study.intake.load import load_plan
    from study.search.tuners import cell_scheduler
    from trainables.schema.space import SchedulerSpec

    sets = ["search.scheduler.type=halving", "search.scheduler.first_rung=2", f"storage={tmp_path}"]
    table = load_plan(Path(__file__).resolve().parents[3] / "search_spaces" / "table_glyphs_quick.yaml", sets)
    scheduler = cell_scheduler(table, StudyLayout.for_spec(table.base))
    assert isinstance(scheduler, HalvingScheduler) and scheduler.budget == table.trials_per_cell
    assert table.lag == table.trials_per_cell  # reproducible: every trial of a cell asked at once
    assert scheduler.rung_epochs == halving_rungs(
        table.base.train.epochs, 2, table.base.search.scheduler.reduction_factor
    )
    assert "first_rung" not in SchedulerSpec(type="asha").model_dump() and "hedge" not in SchedulerSpec().model_dump()
    assert SchedulerSpec(type="halving", hedge=1).model_dump()["hedge"] == 1


def test_a_study_is_one_cell_under_halving_and_is_refused_where_a_table_would_be(tmp_path, spec_dict):
    """A study gets the table's scheduler as its one cell (study.intake.plan), the table's lag under halving, and its
    refusals."""
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from study.intake.spec_reader import parse_spec
    from study.search.tuners import cell_scheduler
    from trainables.schema.errors import SpecError

    spec_dict.update(storage=str(tmp_path), validation={"kind": "holdout"})
    spec_dict["train"]["epochs"] = 4
    spec_dict["search"].update(scheduler={"type": "halving", "first_rung": 1}, num_trials=4)
    spec = parse_spec(spec_dict)
    scheduler = cell_scheduler(StudyPlan.of_study(spec), StudyLayout.for_spec(spec))
    assert isinstance(scheduler, HalvingScheduler) and scheduler.cells == [(spec.name, {})] and scheduler.budget == 4
    assert StudyPlan.of_study(spec).lag == 4  # reproducible under halving: every trial asked at once
    spec_dict["search"]["scheduler"]["first_rung"] = 4
    with pytest.raises(SpecError, match="first_rung 4 must be below train.epochs 4"):
        parse_spec(spec_dict)

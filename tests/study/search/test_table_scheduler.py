"""Early stopping per cell (issue 42): :class:`CellASHA`'s decisions equal a brute-force per-cell ASHA written here from
the rule (cutoff: the (1 − 1/η) quantile of the values the cell's earlier trials recorded at that rung), a noisy
cell's best trial is promoted although it scores below every clean trial, and the rungs survive a restart with no
value lost and no trial decided twice. No Ray cluster: the scheduler is driven with Ray's own call sequence."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from study.search.cell_asha import CellASHA, Rungs, cell_label_of, rung_values
from trainables.schema.trial import CELL_KEY

CELLS = [("ms.p0", {"family": "ms", "ratio": 0.0}), ("ms.p0.4", {"family": "ms", "ratio": 0.4})]
MAX_T, GRACE, ETA = 9, 1, 3.0


def _scheduler(state_file: str) -> CellASHA:
    return CellASHA(
        CELLS, Rungs(metric="val", mode="max", max_t=MAX_T, grace_period=GRACE, reduction_factor=ETA), state_file
    )


def _trial(trial_id: str, cell: int) -> SimpleNamespace:
    # Stamped with its cell, as the searcher asks it (study.search.cell_search).
    return SimpleNamespace(trial_id=trial_id, config={**CELLS[cell][1], "ms_alpha": 1.0, CELL_KEY: CELLS[cell][0]})


def test_a_trial_s_cell_is_its_stamp_and_an_unstamped_one_is_found_by_its_fixed_values() -> None:
    assert cell_label_of(CELLS, {CELL_KEY: "ms.p0.4"}) == "ms.p0.4"  # the stamp alone decides
    assert cell_label_of(CELLS, {**CELLS[0][1], CELL_KEY: "ms.p0.4"}) == "ms.p0.4"
    assert cell_label_of(CELLS, {CELL_KEY: "no.such.cell"}) is None
    assert cell_label_of(CELLS, {**CELLS[1][1], "ms_alpha": 1.0}) == "ms.p0.4"  # asked before issue 49: matched


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default percentile), by hand."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


class BruteForceCellASHA:
    """The per-cell ASHA rule, from the paper's description and Ray's milestones (grace · η^k up to max_t)."""

    def __init__(self) -> None:
        self.milestones = [GRACE * ETA**k for k in range(10) if GRACE * ETA**k <= MAX_T]
        self.recorded: dict[tuple[str, float], dict[str, float]] = {}

    def decide(self, cell: str, trial_id: str, epoch: int, value: float) -> str:
        decision = TrialScheduler.STOP if epoch >= MAX_T else TrialScheduler.CONTINUE
        if epoch >= MAX_T:
            return decision
        for milestone in sorted(self.milestones, reverse=True):
            rung = self.recorded.setdefault((cell, milestone), {})
            if epoch < milestone or trial_id in rung:
                continue
            if rung and value < _quantile(list(rung.values()), 1 - 1 / ETA):
                decision = TrialScheduler.STOP
            rung[trial_id] = value
            break
        return decision


def _events(seed: int, trials_per_cell: int = 8) -> list[tuple[str, int, dict[int, float]]]:
    """Trials with a value per epoch; the noisy cell's values all sit below the clean cell's."""
    rng = random.Random(seed)
    out = []
    for cell in (0, 1):
        for i in range(trials_per_cell):
            base = (0.6 if cell == 0 else 0.1) + 0.2 * rng.random()
            out.append((f"c{cell}t{i}", cell, {e: base + 0.01 * e + 0.02 * rng.random() for e in range(1, MAX_T + 1)}))
    return out


def _drive(scheduler_of, events, seed: int, stop_after: int | None = None):
    """Ray's call sequence with up to 3 trials in flight, reports interleaved at random: add, a result per epoch until
    STOP, complete. ``scheduler_of()`` is asked for the scheduler before every call (a test swaps in a restored one).
    Returns the decisions ``(trial_id, epoch, decision)`` in order; ``stop_after`` ends the run after that many."""
    rng = random.Random(seed)
    pending, live, decisions = list(events), {}, []
    while pending or live:
        while pending and len(live) < 3:
            trial_id, cell, values = pending.pop(0)
            trial = _trial(trial_id, cell)
            scheduler_of().on_trial_add(None, trial)
            live[trial_id] = (trial, values, 0)
        trial_id = rng.choice(sorted(live))
        trial, values, epoch = live[trial_id]
        epoch += 1
        result = {"training_iteration": epoch, "val": values[epoch]}
        decision = scheduler_of().on_trial_result(None, trial, result)
        decisions.append((trial_id, epoch, decision))
        if decision == TrialScheduler.STOP:
            scheduler_of().on_trial_complete(None, trial, result)
            del live[trial_id]
        else:
            live[trial_id] = (trial, values, epoch)
        if stop_after is not None and len(decisions) >= stop_after:
            return decisions, live
    return decisions, live


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decisions_equal_a_brute_force_per_cell_asha(tmp_path, seed):
    events = _events(seed)
    scheduler = _scheduler(str(tmp_path / "asha.json"))
    decisions, _ = _drive(lambda: scheduler, events, seed)
    reference, cell_of = BruteForceCellASHA(), {t: CELLS[c][0] for t, c, _ in events}
    values = {t: v for t, _, v in events}
    expected = [(t, e, reference.decide(cell_of[t], t, e, values[t][e])) for t, e, _ in decisions]
    assert decisions == expected
    stopped_early = {t for t, e, d in decisions if d == TrialScheduler.STOP and e < MAX_T}
    assert stopped_early and len(stopped_early) < len(events)  # the rule did stop some, not all


def test_a_noisy_cells_best_trial_is_promoted_though_below_every_clean_trial(tmp_path):
    """Two clean trials reach rung 1 at 0.90 and 0.91, a noisy one at 0.30; the noisy cell's next trial scores 0.35:
    best of its cell, below every clean value. Per cell it goes on; one ASHA over the table (Ray's) stops it."""
    cell_asha, one_asha = (
        _scheduler(str(tmp_path / "asha.json")),
        ASHAScheduler(metric="val", mode="max", max_t=MAX_T, grace_period=GRACE, reduction_factor=ETA),
    )
    outcome = {}
    for scheduler in (cell_asha, one_asha):
        for trial_id, cell, value in (("a", 0, 0.90), ("b", 0, 0.91), ("x", 1, 0.30), ("y", 1, 0.35)):
            trial = _trial(trial_id, cell)
            scheduler.on_trial_add(None, trial)
            outcome[scheduler, trial_id] = scheduler.on_trial_result(
                None, trial, {"training_iteration": 1, "val": value}
            )
    assert outcome[cell_asha, "y"] == TrialScheduler.CONTINUE
    assert outcome[one_asha, "y"] == TrialScheduler.STOP
    assert rung_values(cell_asha)["ms.p0.4"][1] == {"x": 0.30, "y": 0.35}


def test_rungs_survive_a_restart_with_none_lost_and_none_decided_twice(tmp_path):
    """The driver dies after 20 decisions; a scheduler rebuilt from the start-of-experiment pickle (empty) reads the
    state file and the run goes on, the live trials replaying their last epoch from an older checkpoint. Every
    decision equals the uninterrupted run's, and the rungs end the same."""
    events, state = _events(5), str(tmp_path / "asha.json")
    straight = _scheduler(str(tmp_path / "straight.json"))
    whole, _ = _drive(lambda: straight, events, seed=5)

    first = _scheduler(state)
    before, live = _drive(lambda: first, events, seed=5, stop_after=20)
    assert before == whole[:20]
    restored = _scheduler(state)  # what Tuner.restore rebuilds: the pickle from the start, empty rungs
    replayed = []
    for trial, values, epoch in live.values():
        restored.on_trial_add(None, trial)  # a restored live trial keeps its cell and rungs
        if epoch >= 1:  # its checkpoint was one epoch older: the epoch it had reported comes again
            decision = restored.on_trial_result(None, trial, {"training_iteration": epoch, "val": values[epoch]})
            replayed.append(decision)
    assert all(d == TrialScheduler.CONTINUE for d in replayed)  # nothing decided twice
    assert rung_values(restored) == rung_values(first)  # no recorded rung value lost

    # The rest of the run on the restored scheduler: the same calls the uninterrupted run made after decision 20.
    replay(restored, events, whole[20:])
    assert rung_values(restored) == rung_values(straight)


def replay(restored: CellASHA, events, rest) -> None:
    """Make on ``restored`` the calls an uninterrupted run made (``rest``: its decisions after the restart), each
    decision asserted equal to that run's."""
    trials = {t: (_trial(t, c), v) for t, c, v in events}
    added = set(restored.trial_cell)
    for trial_id, epoch, expected in rest:
        trial, values = trials[trial_id]
        if trial_id not in added:
            restored.on_trial_add(None, trial)
            added.add(trial_id)
        result = {"training_iteration": epoch, "val": values[epoch]}
        assert restored.on_trial_result(None, trial, result) == expected
        if expected == TrialScheduler.STOP:
            restored.on_trial_complete(None, trial, result)


def test_a_cells_winner_is_its_best_trial_that_trained_every_epoch(tmp_path):
    """A stopped trial's last value is of an earlier epoch: cell A's stopped 0.9 at epoch 1 does not beat its full
    trial's 0.8 at epoch 4; cell B, where no trial ran to the end, keeps its best stopped one."""
    from pathlib import Path

    from study.final.stage import best_per_group
    from study.intake.load import load_plan

    table = load_plan(Path(__file__).resolve().parents[3] / "search_spaces" / "table_glyphs_quick.yaml")
    cell_a, cell_b = table.cells[0], table.cells[1]
    rows = [(cell_a, 1, 0.9), (cell_a, 4, 0.8), (cell_a, 4, 0.7), (cell_b, 1, 0.5), (cell_b, 2, 0.4)]
    results = [
        SimpleNamespace(
            config={**cell.fixed, "n": i},
            metrics={"val/recall_at_1": v, "epoch": e},
            error=None,
            path=str(tmp_path / f"trial_{i}"),
        )
        for i, (cell, e, v) in enumerate(rows)
    ]
    grid = type("Grid", (), {"__len__": lambda self: len(results), "__getitem__": lambda self, i: results[i]})()
    best = best_per_group(
        table.base, grid, {}, lambda config: next(c.label for c in table.cells if c.fixed.items() <= config.items())
    )
    assert {label: r.config["n"] for label, r in best.items()} == {cell_a.label: 1, cell_b.label: 3}

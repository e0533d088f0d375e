"""Should a synchronous-halving rung decide on a trial's value at the rung's epoch, or on the mean of its last two
epochs ("a rung may decide on the mean of the last two epochs if that measures better")?

Replayed offline on FIFO tables, where every trial trained every epoch and Optuna holds each trial's validation value
per epoch (its intermediate values): for each cell (one Optuna study), :mod:`study.search.halving`'s own rungs and
keep rule (:func:`~study.search.halving.halving_rungs`, :func:`~study.search.halving.kept_at_rung`: the best
⌈n/η⌉, ties to the earlier trial) are applied with each rule's score, and the survivors' last values give halving's
pick, as the final stage picks. Printed per cell and rule: the pick's last value against FIFO's (the best last value
of all trials: what halving tries to keep), whether it is FIFO's trial, and at each rung the Spearman correlation of
the rule's score with the trials' last values. The replay needs no Ray and reads Optuna only (nothing is written).

    PYTHONPATH=$PWD python -m benchmarks.rung_rule /work/bench-tc50/table_glyphs_fifo --first-rung 3 --eta 3

A replay, not a rerun: under halving the trials TPE asks after its start-up would differ (it learns from different
trials), so this isolates the rung rule on the same population of trials.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from study.search.halving import halving_rungs, kept_at_rung
from study.tracking.doors import load_optuna_study, optuna_study_names
from trainables.schema import record as R

__all__ = ["RULES", "CellReplay", "replay_cell", "main"]

#: A trial's history (epoch → value) and a rung's epoch → the score a rung ranks it by.
Score = Callable[[dict[int, float], int], float]

RULES: dict[str, Score] = {
    "last": lambda history, epoch: history[epoch],
    "mean2": lambda history, epoch: (history[epoch] + history.get(epoch - 1, history[epoch])) / 2.0,
}


@dataclass(frozen=True)
class CellReplay:
    """One cell under one rule: halving's pick (trial number, its last value), FIFO's, and per rung the Spearman
    correlation of the rule's scores with the trials' last values."""

    cell: str
    rule: str
    pick: int
    pick_value: float
    fifo: int
    fifo_value: float
    spearman: tuple[float, ...]

    @property
    def regret(self) -> float:
        return self.fifo_value - self.pick_value


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ (average ranks for ties)."""
    rx = _ranks(np.asarray(x, dtype=float))
    ry = _ranks(np.asarray(y, dtype=float))
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for v in np.unique(values):  # ties share their mean rank
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def replay_cell(
    cell: str, histories: dict[int, dict[int, float]], rule: str, first_rung: int, eta: float, epochs: int
) -> CellReplay:
    """Halving with ``rule``'s scores on a cell's full histories (trial number → epoch → value; mode max)."""
    last = {n: h[epochs] for n, h in histories.items()}
    alive = set(histories)
    spearman = []
    for epoch in halving_rungs(epochs, first_rung, eta):
        scores = {str(n): RULES[rule](histories[n], epoch) for n in sorted(alive)}
        spearman.append(_spearman(list(scores.values()), [last[int(n)] for n in scores]))
        alive = {int(t) for t in kept_at_rung(scores, mode="max", eta=eta, order={t: int(t) for t in scores})}
    pick = min(alive, key=lambda n: (-last[n], n))
    fifo = min(last, key=lambda n: (-last[n], n))
    return CellReplay(cell, rule, pick, last[pick], fifo, last[fifo], tuple(spearman))


def cell_histories(study_dir: Path) -> tuple[dict[str, dict[int, dict[int, float]]], int]:
    """Per cell (Optuna study) of a FIFO table, each finished trial's validation value per epoch; the epochs of a
    full trial (the longest history)."""
    url = R.sqlite_uri(study_dir / R.OPTUNA_DB)
    cells: dict[str, dict[int, dict[int, float]]] = {}
    for name in optuna_study_names(url, study_dir.name):
        trials = load_optuna_study(name, url).get_trials(deepcopy=False)
        cells[name.removeprefix(study_dir.name + ".")] = {
            t.number: {int(k): float(v) for k, v in t.intermediate_values.items()}
            for t in trials
            if t.state.name == "COMPLETE"
        }
    epochs = max((max(h) for c in cells.values() for h in c.values() if h), default=0)
    full = {c: {n: h for n, h in trials.items() if len(h) == epochs} for c, trials in cells.items()}
    return full, epochs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rung_rule", description=__doc__.split("\n\n")[0])
    p.add_argument("study", nargs="+", type=Path, help="the study directory of a FIFO table run")
    p.add_argument("--first-rung", type=int, default=3)
    p.add_argument("--eta", type=float, default=3.0)
    args = p.parse_args(argv)
    replays: list[CellReplay] = []
    for study_dir in args.study:
        cells, epochs = cell_histories(study_dir)
        rungs = halving_rungs(epochs, args.first_rung, args.eta)
        print(f"== {study_dir.name}: {len(cells)} cells, {epochs} epochs, rungs at {rungs}, η {args.eta:g}")
        print(
            f"{'cell':<18} {'rule':<6} {'trials':>6} {'pick':>5} {'pick last':>10} {'FIFO':>5} {'FIFO last':>10}  ρ per rung"
        )
        for cell, histories in cells.items():
            for rule in RULES:
                r = replay_cell(cell, histories, rule, args.first_rung, args.eta, epochs)
                replays.append(r)
                rho = " ".join(f"{x:+.2f}" for x in r.spearman)
                print(
                    f"{cell:<18} {rule:<6} {len(histories):>6} {r.pick:>5} {r.pick_value:>10.4f} {r.fifo:>5} "
                    f"{r.fifo_value:>10.4f}  {rho}"
                )
    print("\nover all cells:")
    for rule in RULES:
        mine = [r for r in replays if r.rule == rule]
        kept = sum(r.pick == r.fifo for r in mine)
        mean_rho = np.nanmean([x for r in mine for x in r.spearman]) if mine else math.nan
        print(
            f"  {rule:<6} kept FIFO's winner in {kept}/{len(mine)} cells; mean regret "
            f"{np.mean([r.regret for r in mine]):.4f} (max {max(r.regret for r in mine):.4f}); mean ρ at the rungs "
            f"{mean_rho:+.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

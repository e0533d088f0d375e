"""What early stopping per cell buys a table, and whether it keeps the table's conclusions (issues 42 and 50).

Runs one table once per scheduler, one run after the other, at the same ``num_trials`` and ``search.replicates``
(default: FIFO, synchronous halving per cell, async ASHA per cell; R = 2), each a real ``python -m study.run`` with
its own Ray, then reads every run back from its stores and prints

- the search's model-epochs (folds × epochs the trials trained) per scheduler and their ratio to FIFO's (goal:
  halving ≤ 35 % of FIFO's);
- each run's slot use, search alone and the whole run (search and final stage: the trials' summed wall time over
  the slots against the driver's wall; goal ≤ 1.1);
- per cell (arm × condition), each replicate's chosen validation score under each scheduler;
- per comparison (an arm against the reference on one condition), Δ and its significance (Holm-corrected within the
  replicate's table, as the report's) under each scheduler and replicate: replicate r of a table is one complete
  table (``study.intake.plan.replicate_seed``), so each is compared on its own;
- the agreement between conclusions: how often a scheduler's replicate draws FIFO's conclusion, next to how often
  two replicates of one scheduler agree (the search's own variance, the floor any scheduler is measured against).
  Two rules (:func:`agrees`): **match**, the same sign of Δ and significant under both or under neither; **no flip**,
  no Δ significant under one has the other sign (or is 0) under the other (the rule of the first scheduler comparison, :func:`conclusions`);
- the bill the run printed before it started (its size line: FIFO's hours and the scheduled ones, measured on this
  machine) against what the run cost (the report's "Bill against actual" line, and the driver's wall).

The default table: the glyphs table (``search_spaces/table_glyphs.yaml``) reduced to **ms** (the reference) and
**bspml** at **20 % noise**, the one comparison that flipped under ASHA in the first scheduler comparison and changed sign across
search seeds under FIFO ("The search's own variance", docs/notebook/tables.md), with room for rungs: **20 epochs, 12 trials a
cell** (the shipped 7 epochs leave no rung past the start). Halving: **first rung 3, η 3** (rungs at epochs 3 and 9 of
20; exactly 34 % of FIFO's search model-epochs with 12 trials, ``trainables.schema.scheduler.halving.halving_share``): epoch 3 is
past the first epochs, whose rungs in that comparison judged how fast MS's α/β start rather than where they end, and
it is the latest first rung that meets the 35 % goal at this size (first rung 4, η 3: 40 %; first rung 3, η 2:
37 %). ASHA: grace 3, η 3, the same rungs, so the two differ by their rule only.

    PYTHONPATH=$PWD python -m benchmarks.table_cost --workdir /work/bench-tc50   # the full run (docs/notebook/tables.md)
    PYTHONPATH=$PWD python -m benchmarks.table_cost --plan                       # its bill, nothing run
    PYTHONPATH=$PWD python -m benchmarks.table_cost --schedulers fifo halving --set train.epochs=3 \\
        --set search.num_trials=2 --set train.batches_per_epoch=4 --set final.seeds=2 \\
        --halving-set search.scheduler.first_rung=1                              # a smoke run, minutes

``--set`` applies to every run (after the defaults above, so it overrides them), ``--fifo-set``, ``--halving-set``
and ``--asha-set`` to that scheduler's run only (e.g. ``--halving-set search.scheduler.first_rung=2``);
``--arms`` keeps those arms (the reference always), ``--ratios`` sets the cells' noise ratios, ``--replicates`` the
searches per cell. The studies go to ``--workdir`` (default a fresh temporary folder, kept: its path is printed) as
``<name>_<scheduler>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.table_cost._conclusions import Conclusion, agreement, agrees, conclusions
from benchmarks.table_cost._report import billed_hours, report
from benchmarks.table_cost._runs import (
    DEFAULT_ARMS,
    DEFAULT_RATIOS,
    DEFAULT_SPEC,
    SCHEDULER_SETS,
    SCHEDULERS,
    RunCost,
    _raw_table,
    _run,
    _study_run,
    _write,
)

__all__ = ["RunCost", "Conclusion", "agrees", "conclusions", "agreement", "billed_hours", "report", "main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.table_cost", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"the table (default {DEFAULT_SPEC})")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE for every run")
    for mode in SCHEDULERS:
        p.add_argument(f"--{mode}-set", action="append", default=[], help=f"KEY=VALUE for the {mode} run only")
    p.add_argument("--schedulers", nargs="+", choices=SCHEDULERS, default=list(SCHEDULERS), help="the runs, in order")
    p.add_argument("--replicates", type=int, default=2, help="search.replicates of every run (default 2)")
    p.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), help="keep these arms (and the reference)")
    p.add_argument("--ratios", nargs="+", type=float, default=list(DEFAULT_RATIOS), help="the cells' noise ratios")
    p.add_argument("--workdir", default=None, help="where the studies go (default: a new temporary folder)")
    p.add_argument("--plan", action="store_true", help="print each run's measured bill (study.run --plan) and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="table_cost_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"command: python -m benchmarks.table_cost {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"table_cost: {args.spec}; studies in {workdir}; load {os.getloadavg()[0]:.1f}", flush=True)
    runs: dict[str, Any] = {}
    for mode in args.schedulers:
        overrides = [*SCHEDULER_SETS[mode], *args.overrides, *getattr(args, f"{mode}_set")]
        raw = _raw_table(args.spec, overrides, args, mode, workdir)
        if args.plan:
            proc, _ = _study_run(_write(raw, workdir, mode)[1], "--plan")
            print(f"{mode}: {proc.stdout.strip() or proc.stderr.strip()}", flush=True)
            continue
        runs[mode] = _run(raw, workdir, mode)
    if runs:
        report(runs)
    return 0

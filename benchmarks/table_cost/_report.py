"""The printed comparison of the runs: cost, bill, cells, conclusions and their agreement."""

from __future__ import annotations

import math
import re

from benchmarks.table_cost._conclusions import Conclusion, Key, _key_text, _pairings, _share, agreement
from benchmarks.table_cost._runs import RunCost
from study.intake.plan import StudyPlan


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def _print_cost(runs: dict[str, RunCost]) -> None:
    fifo = runs.get("fifo")
    base = fifo.model_epochs if fifo else math.nan
    print("\nsearch model-epochs (all replicates), ratio to FIFO's (goal: halving ≤ 0.35):")
    for run in runs.values():
        share = f"; expected {run.table.search_share:.0%}" if run.table.scheduled else ""
        print(f"  {run.mode:<8} {run.model_epochs:>8.0f}  ratio {_ratio(run.model_epochs, base)}{share}")
    print("\nwall and slot use (goal: whole run ≤ 1.1):")
    for run in runs.values():
        ratio = "" if fifo is None else f" (ratio to FIFO's {_ratio(run.driver_wall_s, fifo.driver_wall_s)})"
        print(f"  {run.mode}: driver {run.driver_wall_s:.0f} s{ratio}, process {run.wall_s:.0f} s")
        print(f"    {run.use.text() if run.use else 'search slot use: n/a'}")
        whole = run.whole_use
        print(f"    {whole.text() if whole else 'whole-run slot use: n/a (no final runs read)'}")


def _print_bill(runs: dict[str, RunCost]) -> None:
    print("\nthe bill (the size line's, measured before the run) against the actual cost:")
    for run in runs.values():
        fifo_h, scheduled_h = billed_hours(run.size_line)
        billed = "no bill printed" if fifo_h is None else f"billed FIFO ≈ {fifo_h:.2f} h"
        if scheduled_h is not None:
            billed += f", {run.mode} ≈ {scheduled_h:.2f} h"
        print(f"  {run.mode}: {billed}; driver wall {run.driver_wall_s / 3600:.2f} h")
        if run.bill_line:
            print(f"    {run.bill_line}")


def billed_hours(size_line: str) -> tuple[float | None, float | None]:
    """FIFO's hours and the scheduled hours a size line prints (``None`` where it prints none)."""
    fifo = re.search(r"\(FIFO\): \d+ model-epochs, ≈ ([\d.]+) h", size_line)
    scheduled = re.search(r"model-epochs in all, ≈ ([\d.]+) h", size_line)
    return (float(fifo[1]) if fifo else None, float(scheduled[1]) if scheduled else None)


def _print_cells(runs: dict[str, RunCost]) -> None:
    first = next(iter(runs.values()))
    metric = first.table.base.search.metric
    heads = [f"{m} r{r}" for m in runs for r in range(first.table.replicates)]
    print(f"\nper cell: each replicate's chosen {metric}; model-epochs and stopped/finished per scheduler")
    print(f"  {'cell':<18} " + " ".join(f"{h:>10}" for h in heads) + "   " + " ".join(f"{m:>12}" for m in runs))
    for key in dict.fromkeys(c.cell.key for c in first.cells):
        values, costs = [], []
        for run in runs.values():
            mine = [c for c in run.cells if c.cell.key == key]
            values += ["" if c.best_value is None else f"{c.best_value:.4f}" for c in mine]
            spent = sum(c.model_epochs for c in mine)
            costs.append(f"{spent:.0f} {sum(c.pruned for c in mine)}/{sum(c.finished for c in mine)}")
        print(f"  {key:<18} " + " ".join(f"{v:>10}" for v in values) + "   " + " ".join(f"{c:>12}" for c in costs))


def _print_conclusions(runs: dict[str, RunCost]) -> None:
    first = next(iter(runs.values()))
    per = {m: run.conclusions() for m, run in runs.items()}
    keys = list(dict.fromkeys(k for cs in per.values() for c in cs for k in c))
    print(f"\nper comparison against {first.table.reference}: Δ per scheduler and replicate (* significant, Holm)")
    heads = [f"{m} r{r}" for m in runs for r in range(len(per[m]))]
    print(f"  {'comparison':<30} " + " ".join(f"{h:>10}" for h in heads))
    for key in keys:
        cells = [c[key].text() if key in c else "n/a" for m in runs for c in per[m]]
        print(f"  {_key_text(key):<30} " + " ".join(f"{t:>10}" for t in cells))
    _print_agreement(per, keys)


def _print_agreement(per: dict[str, list[dict[Key, Conclusion]]], keys: list[Key]) -> None:
    print(
        "\nagreement over replicate pairs — match: same sign of Δ, and significant under both or neither; no flip: "
        "no Δ significant under one has the other sign under the other"
    )
    totals: dict[str, list[tuple[bool, bool]]] = {}
    for key in keys:
        parts = []
        for a, b in _pairings(list(per)):
            name = f"{a}↔{b or a}"
            pairs = agreement(per[a], None if b is None else per[b], key)
            totals.setdefault(name, []).extend(pairs)
            parts.append(f"{name} {_share(pairs)}")
        print(f"  {_key_text(key):<30} " + "; ".join(parts))
    for name, pairs in totals.items():
        what = "its replicates with each other" if name.split("↔")[0] == name.split("↔")[1] else "each replicate pair"
        print(f"  all comparisons, {name} ({what}): {_share(pairs)}")


def report(runs: dict[str, RunCost]) -> None:
    first = next(iter(runs.values()))
    t = first.table
    schedulers = ", ".join(f"{m}: {_scheduler_text(r.table)}" for m, r in runs.items())
    print(
        f"\n== table_cost: {t.name.removesuffix('_' + first.mode)}, {len(t.cells) // t.replicates} cells × "
        f"{t.trials_per_cell} trials × {t.base.train.epochs} epochs × {t.replicates} replicates; {schedulers}"
    )
    _print_cost(runs)
    _print_bill(runs)
    _print_cells(runs)
    _print_conclusions(runs)


def _scheduler_text(table: StudyPlan) -> str:
    return table.base.search.scheduler.summary()

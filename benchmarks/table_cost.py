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
  no Δ significant under one has the other sign (or is 0) under the other (issue 42's rule, :func:`conclusions`);
- the bill the run printed before it started (its size line: FIFO's hours and the scheduled ones, measured on this
  machine) against what the run cost (the report's "Bill against actual" line, and the driver's wall).

The default table: the glyphs table (``search_spaces/table_glyphs.yaml``) reduced to **ms** (the reference) and
**bspml** at **20 % noise**, the one comparison that flipped under ASHA in issue 42's run and changed sign across
search seeds under FIFO ("The search's own variance", docs/tables.md), with room for rungs: **20 epochs, 12 trials a
cell** (the shipped 7 epochs leave no rung past the start). Halving: **first rung 3, η 3** (rungs at epochs 3 and 9 of
20; exactly 34 % of FIFO's search model-epochs with 12 trials, ``trainables.schema.scheduler.halving.halving_share``): epoch 3 is
past the first epochs, whose rungs in issue 42's run judged how fast MS's α/β start rather than where they end, and
it is the latest first rung that meets the 35 % goal at this size (first rung 4, η 3: 40 %; first rung 3, η 2:
37 %). ASHA: grace 3, η 3, the same rungs, so the two differ by their rule only.

    PYTHONPATH=$PWD python -m benchmarks.table_cost --workdir /work/bench-tc50   # the full run (docs/tables.md)
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
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dashboards.compare.cells import Row
from study.bill import size_line
from study.cell_status import CellStatus, SlotUse, cells_status, slot_use
from study.intake.cells import parse_table
from study.intake.loading import read_raw
from study.intake.plan import StudyPlan

__all__ = ["RunCost", "Conclusion", "agrees", "conclusions", "agreement", "main"]

DEFAULT_SPEC = "search_spaces/table_glyphs.yaml"
SCHEDULERS = ("fifo", "halving", "asha")
DEFAULT_ARMS = ("ms", "bspml")
DEFAULT_RATIOS = (0.2,)
#: The table's size for every run (before ``--set``): rungs need room.
SIZE_SETS = ("train.epochs=20", "search.num_trials=12")
#: Each scheduler's settings (before its ``--<scheduler>-set``): halving and ASHA on the same rungs, 3 and 9 of 20.
SCHEDULER_SETS: dict[str, tuple[str, ...]] = {
    "fifo": (),
    "halving": ("search.scheduler.first_rung=3", "search.scheduler.reduction_factor=3"),
    "asha": ("search.scheduler.grace_period=3", "search.scheduler.reduction_factor=3"),
}
#: A comparison: (family, noise kind, noise ratio, subset).
Key = tuple[str, str, float, str]


@dataclass(frozen=True)
class Conclusion:
    """What one table says about one comparison: Δ (arm − reference) and whether it is significant (Holm)."""

    delta: float
    significant: bool

    @property
    def sign(self) -> int:
        return (self.delta > 0) - (self.delta < 0)

    def text(self) -> str:
        return f"{self.delta:+.4f}{'*' if self.significant else ' '}"


def agrees(a: Conclusion, b: Conclusion) -> tuple[bool, bool]:
    """``(match, no flip)`` of two conclusions on one comparison. Match: the same sign of Δ, and significant under
    both or under neither. No flip: a Δ significant under either has the same (non-zero) sign under the other; a
    sign change of a Δ significant under neither is no different conclusion."""
    match = a.sign == b.sign and a.significant == b.significant
    no_flip = not (a.significant or b.significant) or (a.sign == b.sign != 0)
    return match, no_flip


def _key(row: Row) -> Key:
    c = row.cell
    return c.family, c.noise_kind, c.noise_ratio, c.subset


def _conclusions_of(rows: list[Row]) -> dict[Key, Conclusion]:
    return {_key(r): Conclusion(r.diff.delta, bool(r.significant)) for r in rows if r.diff is not None}


def _key_text(key: Key) -> str:
    family, kind, ratio, subset = key
    return f"{family} {kind} p={ratio:g}{'' if subset == 'all' else ' ' + subset}"


def conclusions(
    first: list[Row], second: list[Row], names: tuple[str, str] = ("fifo", "asha")
) -> tuple[bool, list[str]]:
    """Whether two comparisons draw the same conclusions under the no-flip rule of :func:`agrees`, and one line per
    difference against the reference that both hold."""
    other = _conclusions_of(second)
    same, lines = True, []
    for key, a in _conclusions_of(first).items():
        if (b := other.get(key)) is None:
            continue
        no_flip = agrees(a, b)[1]
        same &= no_flip
        lines.append(
            f"  {_key_text(key):<30} Δ {names[0]} {a.delta:+.4f}{' *' if a.significant else '  '}  "
            f"Δ {names[1]} {b.delta:+.4f}{' *' if b.significant else '  '}  {'same' if no_flip else 'DIFFERS'}"
        )
    return same, lines


@dataclass(frozen=True)
class RunCost:
    """One run of the table, read back: its cells, search slot use, walls, final stage's trial time, the comparison
    per replicate, and the lines of its output that price it (the size line, the bill against the actual cost)."""

    mode: str
    table: StudyPlan
    cells: list[CellStatus]
    use: SlotUse | None
    #: The process's wall (Ray's start and the calibration included) and the driver's (search and final stage).
    wall_s: float
    driver_wall_s: float
    #: The final runs' summed ``cost/wall_s`` (``None``: not read).
    final_trial_s: float | None
    #: Per replicate, its table's comparison rows against the reference.
    rows: list[list[Row]]
    size_line: str = ""
    bill_line: str = ""

    @property
    def model_epochs(self) -> float:
        return sum(c.model_epochs for c in self.cells)

    @property
    def whole_use(self) -> SlotUse | None:
        """Slot use of the whole run: search and final trials' wall over the slots against the driver's wall."""
        if self.final_trial_s is None:
            return None
        trial_s = sum(c.wall_s for c in self.cells) + self.final_trial_s
        return SlotUse(self.driver_wall_s, trial_s, self.table.base.search.max_concurrent, "whole-run")

    def conclusions(self) -> list[dict[Key, Conclusion]]:
        return [_conclusions_of(rows) for rows in self.rows]


def _raw_table(spec: str, overrides: list[str], args: argparse.Namespace, mode: str, workdir: Path) -> dict:
    raw = read_raw(spec, [*SIZE_SETS, f"search.replicates={args.replicates}", *overrides])
    if args.ratios:
        raw["cells"]["dataset.noise.ratio"] = args.ratios
    if args.arms:
        raw["arms"] = {k: v for k, v in raw["arms"].items() if k in args.arms or k == raw["reference"]}
        for extra in raw.get("extra_cells") or []:
            extra["arms"] = [a for a in extra["arms"] if a in raw["arms"]]
        raw["extra_cells"] = [e for e in raw.get("extra_cells") or [] if e["arms"]]
    raw["name"] = f"{raw['name']}_{mode}"
    raw["storage"] = str(workdir)
    raw.setdefault("search", {}).setdefault("scheduler", {})["type"] = mode
    raw["search"].pop("max_hours", None)  # a benchmark measures; it is not refused by the estimate
    raw["search"].pop("epoch_seconds", None)  # the run measures its bill on this machine (the size line prints it)
    return raw


def _line(text: str, prefix: str) -> str:
    return next((line for line in text.splitlines() if line.startswith(prefix)), "")


def _write(raw: dict, workdir: Path, mode: str) -> tuple[StudyPlan, Path]:
    table = parse_table(raw, mode)
    path = workdir / f"{table.name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return table, path


def _study_run(path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m study.run PATH`` with its own Ray (a fresh ``RAY_TMPDIR``), and its wall seconds."""
    env = {**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="rbtc", dir="/tmp"), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "study.run", str(path), "--no-dashboard", *extra],
        env=env,
        capture_output=True,
        text=True,
    )
    return proc, time.perf_counter() - start


def _run(raw: dict, workdir: Path, mode: str) -> RunCost:
    table, path = _write(raw, workdir, mode)
    print(f"{mode}: running {path}", flush=True)
    proc, wall = _study_run(path)
    if proc.returncode != 0:
        raise SystemExit(f"table_cost: the {mode} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    size = _line(proc.stdout, f"Table {table.name}:")
    print(f"{mode}: {size or size_line(table)}", flush=True)
    done = re.search(r"^Table '[^']*': \d+ trials \(\d+ failed\) in (\d+) s$", proc.stdout, re.MULTILINE)
    cells = cells_status(table)
    rows, final_s = _read_back(table, mode)
    return RunCost(
        mode,
        table,
        cells,
        slot_use(cells, table.base.search.max_concurrent, table.final_with_search),
        wall,
        float(done[1]) if done else wall,
        final_s,
        rows,
        size,
        _line(proc.stdout, "Bill against actual"),
    )


def _read_back(table: StudyPlan, mode: str) -> tuple[list[list[Row]], float | None]:
    """Per replicate its table's comparison rows (Holm within the replicate), and the final runs' summed wall."""
    import polars as pl

    from dashboards.compare.cli import read_study
    from dashboards.compare.rows import build_comparison
    from dashboards.load import DashboardError
    from dashboards.table_report import final_wall_s
    from study.intake.layout import StudyLayout
    from trainables.schema import record as R
    from trainables.schema.metric_names import final_metric

    try:
        data = read_study(StudyLayout.for_spec(table.base).root)
    except DashboardError as e:
        print(f"{mode}: no comparison ({e})")
        return [[] for _ in range(table.replicates)], None
    out = []
    for r in range(table.replicates):
        labels = [c.label for c in table.cells if c.replicate == r]
        runs = data.runs.filter(pl.col(R.GROUP).is_in(labels))
        metric = final_metric(table.base.search.metric)
        try:
            out.append(build_comparison(runs, table.reference, metric, studies=[table.base.name]).rows)
        except DashboardError as e:
            print(f"{mode} r{r}: no comparison ({e})")
            out.append([])
    return out, final_wall_s(data)


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


def agreement(
    a: Sequence[dict[Key, Conclusion]], b: Sequence[dict[Key, Conclusion]] | None, key: Key
) -> list[tuple[bool, bool]]:
    """:func:`agrees` over replicate pairs on one comparison: every (a's replicate i, b's replicate j) pair, or, with
    ``b`` None, every pair i < j of a's own replicates; pairs where either lacks the comparison are left out."""
    if b is None:
        pairs = [(a[i], a[j]) for i in range(len(a)) for j in range(i + 1, len(a))]
    else:
        pairs = [(x, y) for x in a for y in b]
    return [agrees(x[key], y[key]) for x, y in pairs if key in x and key in y]


def _pairings(modes: list[str]) -> list[tuple[str, str | None]]:
    """Each scheduler against itself (its replicates), each other one against FIFO."""
    out: list[tuple[str, str | None]] = [(m, None) for m in modes]
    return out + [(m, "fifo") for m in modes if m != "fifo" and "fifo" in modes]


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


def _share(pairs: list[tuple[bool, bool]]) -> str:
    n = len(pairs)
    return f"match {sum(m for m, _ in pairs)}/{n}, no flip {sum(f for _, f in pairs)}/{n}" if n else "no pairs"


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


if __name__ == "__main__":
    raise SystemExit(main())

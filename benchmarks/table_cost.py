"""What early stopping per cell buys a table, and whether it changes the table's conclusions (issue 42).

Runs one table twice, one run after the other, at the same ``num_trials``: FIFO (every trial to the end) and with ASHA
per cell (study/search/cell_asha.py), each a real ``python -m study.run`` with its own Ray, then reads both back from
their stores and prints

- the search's model-epochs (folds × epochs the trials trained) and wall time, and their ratios (goal: ≤ 40 % of
  FIFO's model-epochs);
- each run's slot use (search wall against the summed trial wall / slots; goal ≤ 1.2);
- per cell, the chosen configuration's validation score under each, and the cell's model-epochs;
- whether the final comparison draws the same conclusions: every difference against the reference arm that is
  significant (Holm-corrected, as the report's) under one run has the same sign under the other, and none flips.

    PYTHONPATH=$PWD python -m benchmarks.table_cost                                   # the glyphs table: ~1 h
    PYTHONPATH=$PWD python -m benchmarks.table_cost --arms ms bspml \\
        --ratios 0.0 0.4 --set search.num_trials=4 --set train.epochs=4 --set final.seeds=2

``--set`` applies to both runs, ``--asha-set`` to the scheduled one only (e.g. ``search.scheduler.grace_period=2``);
``--arms`` keeps those arms (the reference always), ``--ratios`` sets the cells' noise ratios. The studies go to ``--workdir`` (default a fresh temporary folder,
kept: its path is printed) as ``<name>_fifo`` and ``<name>_asha``.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from dashboards.compare.cells import Row
from study.loading import read_raw
from study.table.spec import Table, parse_table
from study.table.status import CellStatus, SlotUse, slot_use, table_status

__all__ = ["RunCost", "conclusions", "main"]

DEFAULT_SPEC = "search_spaces/table_glyphs.yaml"
MODES = ("fifo", "asha")


@dataclass(frozen=True)
class RunCost:
    """One run of the table, read back: its cells, slot use, whole wall time and final comparison rows."""

    mode: str
    table: Table
    cells: list[CellStatus]
    use: SlotUse | None
    wall_s: float
    rows: list[Row]

    @property
    def model_epochs(self) -> float:
        return sum(c.model_epochs for c in self.cells)


def _key(row: Row) -> tuple[str, str, float, str]:
    c = row.cell
    return c.family, c.noise_kind, c.noise_ratio, c.subset


def conclusions(first: list[Row], second: list[Row]) -> tuple[bool, list[str]]:
    """Whether two comparisons draw the same conclusions, and one line per difference against the reference: every
    difference significant under either has the same sign under the other (a flip is a sign change of one that is
    significant somewhere)."""
    other = {_key(r): r for r in second if r.diff is not None}
    same, lines = True, []
    for row in first:
        match = other.get(_key(row))
        if row.diff is None or match is None or match.diff is None:
            continue
        a, b = row.diff.delta, match.diff.delta
        significant = bool(row.significant) or bool(match.significant)
        agrees = not significant or (math.copysign(1, a) == math.copysign(1, b) and a != 0 and b != 0)
        same &= agrees
        family, kind, ratio, subset = _key(row)
        lines.append(
            f"  {family:<14} {kind} p={ratio:g}{'' if subset == 'all' else ' ' + subset}: "
            f"Δ fifo {a:+.4f}{' *' if row.significant else '  '}  Δ asha {b:+.4f}{' *' if match.significant else '  '}"
            f"  {'same' if agrees else 'DIFFERS'}"
        )
    return same, lines


def _raw_table(
    spec: str, overrides: list[str], arms: list[str] | None, ratios: list[float] | None, mode: str, workdir: Path
) -> dict:
    raw = read_raw(spec, overrides)
    if ratios:
        raw["cells"]["dataset.noise.ratio"] = ratios
    if arms:
        raw["arms"] = {k: v for k, v in raw["arms"].items() if k in arms or k == raw["reference"]}
        for extra in raw.get("extra_cells") or []:
            extra["arms"] = [a for a in extra["arms"] if a in raw["arms"]]
        raw["extra_cells"] = [e for e in raw.get("extra_cells") or [] if e["arms"]]
    raw["name"] = f"{raw['name']}_{mode}"
    raw["storage"] = str(workdir)
    raw.setdefault("search", {}).setdefault("scheduler", {})["type"] = mode
    raw["search"].pop("max_hours", None)  # a benchmark measures; it is not refused by the estimate
    return raw


def _run(raw: dict, workdir: Path, mode: str) -> RunCost:
    from dashboards.compare.cli import read_study
    from dashboards.compare.rows import build_comparison
    from dashboards.load import DashboardError
    from study.layout import StudyLayout
    from trainables.schema.metric_names import final_metric

    table = parse_table(raw, mode)
    path = workdir / f"{table.spec.name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    ray_tmp = tempfile.mkdtemp(prefix="tc", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    print(f"{mode}: {table.size_line()}", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "study.run", str(path), "--no-dashboard"],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"table_cost: the {mode} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    cells = table_status(table)
    layout = StudyLayout.for_spec(table.base)
    try:
        comparison = build_comparison(
            read_study(layout.root).runs,
            table.reference_family,
            final_metric(table.base.search.metric),
            studies=[table.base.name],
        )
        rows = comparison.rows
    except DashboardError as e:
        print(f"{mode}: no comparison ({e})")
        rows = []
    return RunCost(mode, table, cells, slot_use(cells, table.spec.search.max_concurrent), wall, rows)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def report(fifo: RunCost, asha: RunCost) -> bool:
    """Print the comparison; returns whether the conclusions are the same."""
    sch = asha.table.spec.search.scheduler
    print(
        f"\n== table_cost: {fifo.table.spec.name.removesuffix('_fifo')}, {len(fifo.table.cells)} cells × "
        f"{fifo.table.spec.search.num_trials} trials; FIFO vs ASHA per cell (grace {sch.grace_period}, "
        f"η {sch.reduction_factor:g}); expected share {asha.table.search_share():.0%}"
    )
    ratio = asha.model_epochs / fifo.model_epochs if fifo.model_epochs else math.nan
    print(
        f"search model-epochs: fifo {fifo.model_epochs:.0f}, asha {asha.model_epochs:.0f}, "
        f"ratio {ratio:.2f} (goal ≤ 0.40)"
    )
    fw, aw = (u.wall_s if u else math.nan for u in (fifo.use, asha.use))
    print(f"search wall: fifo {fw:.0f} s, asha {aw:.0f} s, ratio {_ratio(aw, fw)}")
    print(
        f"whole run wall (search + final): fifo {fifo.wall_s:.0f} s, asha {asha.wall_s:.0f} s, "
        f"ratio {_ratio(asha.wall_s, fifo.wall_s)}"
    )
    for run in (fifo, asha):
        print(f"{run.mode}: {run.use.text() if run.use else 'search slot use: n/a'} (goal ≤ 1.2)")
    metric = fifo.table.base.search.metric
    print(f"\nper cell: chosen configuration's {metric} and model-epochs")
    print(f"  {'cell':<24} {'fifo':>8} {'asha':>8}   {'fifo m-e':>8} {'asha m-e':>8}  stopped")
    by_label = {c.cell.label: c for c in asha.cells}
    for c in fifo.cells:
        a = by_label[c.cell.label]
        fv = "" if c.best_value is None else f"{c.best_value:.4f}"
        av = "" if a.best_value is None else f"{a.best_value:.4f}"
        print(
            f"  {c.cell.label:<24} {fv:>8} {av:>8}   {c.model_epochs:>8.0f} {a.model_epochs:>8.0f}  "
            f"{a.pruned}/{a.finished}"
        )
    same, lines = conclusions(fifo.rows, asha.rows)
    print(f"\nfinal comparison against {fifo.table.reference_family} (* significant, Holm):")
    print("\n".join(lines) if lines else "  (no differences to compare)")
    print(f"same conclusions: {'yes' if same else 'NO'}")
    return same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.table_cost", description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=DEFAULT_SPEC, help=f"the table (default {DEFAULT_SPEC})")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE for both runs")
    p.add_argument("--asha-set", action="append", default=[], help="KEY=VALUE for the scheduled run only")
    p.add_argument("--arms", nargs="+", default=None, help="keep these arms (and the reference)")
    p.add_argument("--ratios", nargs="+", type=float, default=None, help="the cells' noise ratios (default the spec's)")
    p.add_argument("--workdir", default=None, help="where the two studies go (default: a new temporary folder)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="table_cost_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"command: python -m benchmarks.table_cost {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"table_cost: {args.spec}; studies in {workdir}; load {os.getloadavg()[0]:.1f}")
    runs = {}
    for mode in MODES:
        overrides = args.overrides + (args.asha_set if mode == "asha" else [])
        runs[mode] = _run(_raw_table(args.spec, overrides, args.arms, args.ratios, mode, workdir), workdir, mode)
    report(runs["fifo"], runs["asha"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

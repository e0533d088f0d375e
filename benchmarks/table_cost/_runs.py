"""One run of the table per scheduler: its spec written, ``python -m study.run`` run, and its cost read back."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.table_cost._conclusions import Conclusion, Key, _conclusions_of
from dashboards.compare.cells import Row
from study.bill import size_line
from study.cell_status import CellStatus, SlotUse, cells_status, slot_use
from study.intake.cells import parse_table
from study.intake.plan import StudyPlan
from study.intake.spec_reader import read_raw

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

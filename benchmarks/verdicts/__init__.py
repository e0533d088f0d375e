"""Do a table's verdicts hold? The glyphs table, reduced to ms and bspml at a large-effect and a small-effect noise
level, run whole under 3 master seeds, its verdicts read from its final stage under several designs.

The table (:func:`table_spec`): ``search_spaces/table_glyphs.yaml`` (cosine, FIFO, 8 trials, 7 epochs, 7 final seeds)
with arms ms and bspml at per-class noise 0.2 and 0.4. At 0.4 bspml leads ms by about +0.066 [+0.042, +0.090] over 7
seeds (docs/notebook/tables.md): the large effect, which every design should decide as ``better`` (measured before
the learning rate was annealed; the benchmark's own runs found +0.010 to +0.023, below what its tables could detect:
docs/notebook/selection.md, "The verdicts benchmark"). At 0.2 the Δ is about
+0.01 to +0.02 and its verdict flipped with the search seed (docs/notebook/tables.md, "The search's own variance"): the small
effect. Noise 0.0 is left out: its effect is large too (Δ ≈ −0.045), so it would add cost and no new question.

A **master seed** k changes the three sources of variation a rerun of the table would draw anew, through ``--set``
(:func:`master_overrides`): the search's sampler seed (``k × SEARCH_STRIDE``: replicate r of a table searches at the
arm's seed + r, so the strides keep every master seed's replicates apart), the holdout split (``validation.seed``)
and the final seeds (``final.seed_offset``: seeds ``k × FINAL_STRIDE`` … onwards). Every table runs with
``search.replicates: M`` so that one run serves every design:

- (a) **one search per cell**: replicate 0 of each cell, which is exactly the table at the master seed with R = 1
  (replicate 0 keeps the table's seeds, names and labels; :func:`study.intake.plan.replicate_seed`);
- (b) **fixed R = M**: all M replicates, the crossed replicates × seeds interval;
- (c) **adaptive** ``{min: 2, max: M}``: a replay over (b)'s replicates, round by round, by the sequential rule of
  ``study.final.sequential`` (imported lazily; skipped with its reason where that module or its ``replay`` is not
  there yet). Its replicate r is (b)'s replicate r, so the replay is exact where the rule only reads the replicates.

The **A-vs-A** comparison: a table holds each family once (its comparison's rows are families), so the twin ms arm
is a second table of the ms arm alone at another sampler seed (``+ TWIN_SHIFT``), the same split and final seeds;
its cells, renamed ``ms_twin``, are compared with the main table's ms cells by the same functions the table report
uses (:func:`dashboards.compare.verdicts.judge` over :func:`~dashboards.compare.verdicts.row_evidence` or
:func:`~dashboards.compare.verdicts.replicate_evidence`; Holm over the A-vs-A's own comparisons). Any verdict other
than ``not detectable at this budget`` there is false.

The verdicts are the final stage's, on the table's primary metric (the test counterpart of ``search.metric``),
decided as :func:`dashboards.table_report.table_verdicts` decides them (margin unset). Printed per design: verdict
agreement (the share of comparisons whose verdict is identical under all master seeds; ``not detectable`` agrees only
with itself), false verdicts on A-vs-A, and the cost in model-epochs of the main table (:func:`study.bill.
model_epochs`: planned, FIFO trains every trial fully) against (a).

It resumes: a table whose ``table.md`` exists is read, not rerun; one with a directory is run with ``--resume``.
``--part N`` runs only the N-th table of the plan (printed first), so the benchmark runs in parts.

    PYTHONPATH=$PWD python -m benchmarks.verdicts --out /tmp/bench-verdicts --replicates 3
    PYTHONPATH=$PWD python -m benchmarks.verdicts --out /tmp/bench-verdicts --part 1      # one table, then a summary
    PYTHONPATH=$PWD python -m benchmarks.verdicts --out /tmp/bench-verdicts-smoke --smoke # minutes: 2 trials × 1 epoch
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

from benchmarks.verdicts._common import (
    ARMS,
    FINAL_STRIDE,
    MASTER_SEEDS,
    OPEN,
    REFERENCE,
    REPO,
    SEARCH_STRIDE,
    SMOKE,
    TABLE,
    TWIN_SHIFT,
    Job,
    Size,
    agreement,
    cells_used,
    cost_ratio,
    false_verdicts,
    master_overrides,
)
from benchmarks.verdicts._designs import DESIGNS, Design, Outcome, Skip, TableRun, read_run
from trainables.schema import record as R

__all__ = [
    "DESIGNS",
    "Design",
    "Outcome",
    "TableRun",
    "agreement",
    "false_verdicts",
    "cost_ratio",
    "cells_used",
    "master_overrides",
    "table_spec",
    "main",
    "FINAL_STRIDE",
    "OPEN",
    "SEARCH_STRIDE",
    "TWIN_SHIFT",
]


def table_name(twin: bool, master: int, replicates: int, smoke: bool) -> str:
    return f"verdicts{'_smoke' if smoke else ''}_{'twin' if twin else 'main'}_r{replicates}_m{master}"


def table_spec(out: Path, name: str, twin: bool, replicates: int, size: Size) -> Path:
    """The reduced glyphs table as ``out/<name>.yaml``: arms ms and bspml (the twin: ms alone) at ``size.noises``,
    FIFO, ``search.replicates`` ``replicates``; the master seed comes as ``--set`` overrides."""
    raw = yaml.safe_load(TABLE.read_text())
    raw["name"] = name
    raw["arms"] = {a: raw["arms"][a] for a in ((REFERENCE,) if twin else ARMS)}
    raw["cells"] = {"dataset.noise.ratio": list(size.noises)}
    raw["search"]["scheduler"] = {"type": "fifo"}
    raw["search"]["replicates"] = replicates
    raw["search"]["max_hours"] = 48
    size.apply(raw)
    raw["storage"] = str(out / "runs")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def finished(job: Job) -> bool:
    """Whether the table ran to its end: its ``table.md``, or, for a twin of one cell (the smoke's single noise level,
    which the driver reports as a study and writes no ``table.md`` for), the mark :func:`run_table` leaves on exit 0."""
    return (job.study_dir / R.TABLE_REPORT_FILE).exists() or _done_mark(job).exists()


def _done_mark(job: Job) -> Path:
    return job.study_dir.parent / f"{job.study_dir.name}.finished"


def run_table(job: Job) -> float:
    """Run the table (``--resume`` when its directory exists); a finished one (:func:`finished`) is not rerun.
    Returns the wall seconds spent."""
    if finished(job):
        return 0.0
    sets = [arg for o in job.overrides for arg in ("--set", o)]
    resume = ["--resume"] if job.study_dir.exists() else []
    args = [sys.executable, "-m", "study.run", str(job.spec), *sets, *resume]
    started = time.perf_counter()
    done = subprocess.run(args, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{job.spec.name}: exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    _done_mark(job).write_text("exit 0\n")
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------------- report


def summary(outcomes: Mapping[str, Mapping[int, Outcome]], skipped: Mapping[str, str]) -> list[str]:
    """Per design: agreement, false verdicts on A-vs-A, cost against (a); then each run's verdicts."""
    baseline = sum(o.cost for o in outcomes.get("a", {}).values())
    width = max(len(d.text) for d in DESIGNS.values()) + 4  # "(c) " and the longest design's words
    lines = [f"{'design':<{width}} {'agreement':>10} {'A-vs-A false':>13} {'model-epochs':>13} {'vs (a)':>7}"]
    for key, design in DESIGNS.items():
        if key in skipped:
            lines.append(f"({key}) {design.text:<{width - 4}} skipped: {skipped[key]}")
            continue
        if key not in outcomes:
            continue
        runs = outcomes[key]
        same, total = agreement({m: o.main for m, o in runs.items()})
        wrong, judged = false_verdicts({m: o.aa for m, o in runs.items()})
        cost = sum(o.cost for o in runs.values())
        lines.append(
            f"({key}) {design.text:<{width - 4}} {same:>5}/{total:<4} {wrong:>6}/{judged:<6} {cost:>13.0f} "
            f"{cost_ratio(cost, baseline):>7.2f}"
        )
    lines.append("")
    for key, runs in outcomes.items():
        for master, o in sorted(runs.items()):
            shown = "; ".join(f"{name}: {label}" for name, label in sorted({**o.main, **o.aa}.items()))
            lines.append(f"({key}) master {master}: {shown}")
    return lines


def _jobs(args: argparse.Namespace, replicates: int, size: Size) -> list[tuple[Job, Job]]:
    out: Path = args.out
    pairs = []
    for master in args.masters:
        pair = []
        for twin in (False, True):
            name = table_name(twin, master, replicates, args.smoke)
            pair.append(Job(twin, master, table_spec(out, name, twin, replicates, size), out / "runs" / name))
        pairs.append((pair[0], pair[1]))
    return pairs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-verdicts"))
    parser.add_argument("--masters", type=int, nargs="+", default=list(MASTER_SEEDS))
    parser.add_argument("--replicates", type=int, default=3, help="M: (b)'s R and (c)'s max (default 3)")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="which designs to judge: a,b,c")
    parser.add_argument("--part", type=int, help="run only the N-th table of the plan (1-based), then summarise")
    parser.add_argument("--smoke", action="store_true", help="2 trials × 1 epoch × 2 final seeds, 2 master seeds, M 2")
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else Size()
    if args.smoke:
        args.masters, args.replicates = args.masters[:2], 2
    designs = [d for d in args.designs.split(",") if d]
    if unknown := [d for d in designs if d not in DESIGNS]:
        raise SystemExit(f"--designs: unknown {', '.join(unknown)}; known: {', '.join(DESIGNS)}")
    replicates = args.replicates if any(DESIGNS[d].needs_replicates for d in designs) else 1
    pairs = _jobs(args, replicates, size)
    jobs = [job for pair in pairs for job in pair]
    print(f"{len(jobs)} tables (search.replicates {replicates}, noise {list(size.noises)}):")
    for i, job in enumerate(jobs, 1):
        print(f"  part {i}: {job.study_dir.name}  {' '.join(job.overrides)}")
    for i, job in enumerate(jobs, 1):
        if args.part is None or args.part == i:
            print(f"{job.study_dir.name}: {run_table(job):.0f} s", flush=True)
    outcomes: dict[str, dict[int, Outcome]] = {}
    skipped: dict[str, str] = {}
    for main_job, twin_job in pairs:
        if not all(finished(j) for j in (main_job, twin_job)):
            print(f"master {main_job.master}: not finished yet (its tables: run the other parts)")
            continue
        run = read_run(main_job, twin_job, replicates)
        for key in designs:
            try:
                outcomes.setdefault(key, {})[run.master] = DESIGNS[key].judge(run)
            except Skip as e:
                skipped[key] = str(e)
    print()
    print("\n".join(summary(outcomes, skipped)))


if __name__ == "__main__":
    main()

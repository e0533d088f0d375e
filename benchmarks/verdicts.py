"""Do a table's verdicts hold? The glyphs table, reduced to ms and bspml at a large-effect and a small-effect noise
level, run whole under 3 master seeds, its verdicts read from its final stage under several designs.

The table (:func:`table_spec`): ``search_spaces/table_glyphs.yaml`` (cosine, FIFO, 8 trials, 7 epochs, 7 final seeds)
with arms ms and bspml at per-class noise 0.2 and 0.4. At 0.4 bspml leads ms by about +0.066 [+0.042, +0.090] over 7
seeds (docs/tables.md): the large effect, which every design should decide as ``better``. At 0.2 the Δ is about
+0.01 to +0.02 and its verdict flipped with the search seed (docs/tables.md, "The search's own variance"): the small
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
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
]

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "search_spaces" / "table_glyphs.yaml"
REFERENCE = "ms"
ARMS = (REFERENCE, "bspml")
TWIN = "ms_twin"
#: The small effect (its verdict flipped with the search seed) and the large one (decided at 7 seeds).
NOISES = (0.2, 0.4)
MASTER_SEEDS = (0, 1, 2)
#: Master seed k searches at sampler seed k × this (replicate r at + r): no two master seeds share a search.
SEARCH_STRIDE = 1000
#: The twin ms table's sampler seed is the master's + this (above any replicate's).
TWIN_SHIFT = 500
#: Master seed k's final seeds start at k × this (above any table's final.seeds).
FINAL_STRIDE = 100
OPEN = "not detectable at this budget"
DECIDED = ("better", "worse")


# ---------------------------------------------------------------------------------------------------------- pure parts


def agreement(verdicts: Mapping[int, Mapping[str, str]]) -> tuple[int, int]:
    """Over master seed → (comparison → verdict label): the comparisons whose verdict is identical under every master
    seed, and all comparisons any seed has. A comparison missing under one seed does not agree; ``not detectable``
    agrees only with itself (labels are compared as they are)."""
    names = sorted({name for labels in verdicts.values() for name in labels})
    same = sum(len({labels.get(name) for labels in verdicts.values()}) == 1 for name in names)
    return same, len(names)


def false_verdicts(verdicts: Mapping[int, Mapping[str, str]]) -> tuple[int, int]:
    """On A-vs-A (two arms that are the same): verdicts ``better`` or ``worse``, and all verdicts, over every seed."""
    labels = [label for run in verdicts.values() for label in run.values()]
    return sum(label in DECIDED for label in labels), len(labels)


def cost_ratio(cost: float, baseline: float) -> float:
    """A design's model-epochs over design (a)'s (NaN without a baseline)."""
    return cost / baseline if baseline > 0 else math.nan


def cells_used(rounds: Mapping[str, tuple[str, str, int]], replicates: int) -> dict[str, int]:
    """Per cell, the replicates an adaptive design ran: the most any of its comparisons needed. ``rounds``: comparison
    → (arm's cell, reference's cell, replicates when it was decided or ``replicates`` when open at the end). The
    reference's cell serves every comparison of its noise level, so it runs while any of them is open."""
    used: dict[str, int] = {}
    for cell, ref, r in rounds.values():
        for key in (cell, ref):
            used[key] = max(used.get(key, 0), min(r, replicates))
    return used


# ---------------------------------------------------------------------------------------------------------- the tables


def master_overrides(master: int, twin: bool = False) -> list[str]:
    """``--set`` overrides of master seed ``master``: sampler seed, holdout split, final seeds."""
    sampler = master * SEARCH_STRIDE + (TWIN_SHIFT if twin else 0)
    overrides = [f"search.sampler.seed={sampler}", f"validation.seed={master}"]
    if master:  # an unset offset keeps master seed 0's table.yaml what the table was before the key existed
        overrides.append(f"final.seed_offset={master * FINAL_STRIDE}")
    return overrides


@dataclass(frozen=True)
class Size:
    """What a run of the benchmark trains: the shipped table's budget, or the smoke's tiny one."""

    trials: int | None = None
    epochs: int | None = None
    final_seeds: int | None = None
    noises: tuple[float, ...] = NOISES

    def apply(self, raw: dict[str, Any]) -> None:
        if self.trials is not None:
            raw["search"]["num_trials"] = self.trials
        if self.epochs is not None:
            raw["train"]["epochs"] = self.epochs
        if self.final_seeds is not None:
            raw["final"]["seeds"] = self.final_seeds


SMOKE = Size(trials=2, epochs=1, final_seeds=2, noises=(0.4,))


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


@dataclass(frozen=True)
class Job:
    """One table of the plan: the main table or the twin at one master seed."""

    twin: bool
    master: int
    spec: Path
    study_dir: Path

    @property
    def overrides(self) -> list[str]:
        return master_overrides(self.master, self.twin)


def run_table(job: Job) -> float:
    """Run the table (``--resume`` when its directory exists); a finished one (its ``table.md``) is not rerun.
    Returns the wall seconds spent."""
    if (job.study_dir / R.TABLE_REPORT_FILE).exists():
        return 0.0
    sets = [arg for o in job.overrides for arg in ("--set", o)]
    resume = ["--resume"] if job.study_dir.exists() else []
    args = [sys.executable, "-m", "study.run", str(job.spec), *sets, *resume]
    started = time.perf_counter()
    done = subprocess.run(args, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{job.spec.name}: exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------------- verdicts


@dataclass
class TableRun:
    """One finished master seed: per cell (``dashboards.compare.cells.Cell``) its replicates' final values, the
    main table's and the twin's; the main table's planned model-epochs per cell and replicate."""

    master: int
    main: dict[Any, list[dict[int, float]]]
    twin: dict[Any, list[dict[int, float]]]
    cell_epochs: float
    replicates: int


@dataclass
class Outcome:
    """One design on one master seed: comparison → verdict label, on the main table and on A-vs-A, and the main
    table's model-epochs."""

    main: dict[str, str]
    aa: dict[str, str]
    cost: float
    note: str = ""


def _judge(values: Mapping[Any, list[dict[int, float]]], replicates: int) -> dict[str, str]:
    """The verdicts over each cell's first ``replicates`` replicates, as the table report decides them."""
    from dashboards.compare.replicates import replicate_rows
    from dashboards.compare.verdicts import judge, replicate_evidence, row_evidence

    if replicates == 1:
        evidence = row_evidence({c: reps[0] for c, reps in values.items() if reps and reps[0]}, REFERENCE)
    else:
        evidence = replicate_evidence(replicate_rows({c: reps[:replicates] for c, reps in values.items()}, REFERENCE))
    return {v.name: v.label for v in judge(evidence, _metric())}


def _aa_values(run: TableRun) -> dict[Any, list[dict[int, float]]]:
    """The main table's ms cells and the twin's, renamed :data:`TWIN`."""
    ms = {c: reps for c, reps in run.main.items() if c.family == REFERENCE}
    return {**ms, **{c._replace(family=TWIN): reps for c, reps in run.twin.items()}}


def _fixed(replicates: Callable[[TableRun], int]) -> Callable[[TableRun], Outcome]:
    def design(run: TableRun) -> Outcome:
        r = replicates(run)
        cost = run.cell_epochs * r * len(run.main)
        return Outcome(_judge(run.main, r), _judge(_aa_values(run), r), cost)

    return design


def _adaptive(run: TableRun) -> Outcome:
    """(c): the sequential rule (:func:`study.final.sequential.decide`, ``{min: 2, max: M}``) replayed over (b)'s
    replicates in the order they ran: each comparison decided at the first look that decides it, the rest not
    detectable at M; the cost counts per cell the replicates its open comparisons needed (:func:`cells_used`)."""
    outcomes = []
    for values in (run.main, _aa_values(run)):
        decided, pairs = _sequential(values, run.replicates)
        labels = {name: _SEQUENTIAL_LABELS[d.state] for name, d in decided.items()}
        rounds = {
            name: (str(pairs[name][0]), str(pairs[name][1]), d.round or run.replicates) for name, d in decided.items()
        }
        outcomes.append((labels, cells_used(rounds, run.replicates)))
    (main, used), (aa, _) = outcomes
    return Outcome(main, aa, run.cell_epochs * sum(used.values()))


def _sequential(values: Mapping[Any, list[dict[int, float]]], replicates: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per comparison (named as the table report names it) the sequential rule's decision, and its (arm, reference)
    cells; each cell's complete replicates on the seeds common to every one of them."""
    import numpy as np

    from dashboards.compare.cells import reference_cell
    from dashboards.compare.verdicts import comparison_name
    from study.final.intervals import MIN_SEEDS
    from study.final.sequential import Rule, SequentialPlan, decide

    if replicates < 2:
        raise Skip("the adaptive design needs --replicates 2 or more (its min is 2)")
    complete = {c: [r for r in reps if len(r) >= MIN_SEEDS] for c, reps in values.items()}
    seeds = sorted(set.intersection(*(set(r) for reps in complete.values() for r in reps)))
    cells = {c: np.array([[r[s] for s in seeds] for r in reps]) for c, reps in complete.items() if reps}
    firsts = {c: reps[0] for c, reps in complete.items() if reps}
    pairs = {}
    for cell in cells:
        ref = reference_cell(firsts, REFERENCE, cell)
        if ref is not None and ref != cell and ref in cells:
            pairs[comparison_name(cell)] = (cell, ref)
    return decide(Rule(SequentialPlan(2, replicates)), pairs, cells), pairs


#: The sequential rule's states as the table report labels verdicts (dashboards.compare.verdicts).
_SEQUENTIAL_LABELS = {
    "better": "better",
    "worse": "worse",
    "open": "not detectable at this budget",
    "not detectable": "not detectable at this budget",
    "equivalent": "equivalent",
}


class Skip(Exception):
    """A design that cannot be judged yet, with its reason."""


@dataclass(frozen=True)
class Design:
    """One design: its letter, what it is, and how a finished master seed's verdicts are read under it."""

    key: str
    text: str
    judge: Callable[[TableRun], Outcome]
    needs_replicates: bool = field(default=True)


#: The designs, in the order printed; (a) is the cost baseline. A new design is one more entry.
DESIGNS: dict[str, Design] = {
    "a": Design("a", "one search per cell", _fixed(lambda run: 1), needs_replicates=False),
    "b": Design("b", "fixed R = M", _fixed(lambda run: run.replicates)),
    "c": Design("c", "adaptive {min: 2, max: M} (replayed over (b)'s replicates)", _adaptive),
}


def _metric() -> str:
    from trainables.schema.metric_names import final_metric

    return final_metric(yaml.safe_load(TABLE.read_text())["search"]["metric"])


def read_run(main: Job, twin: Job, replicates: int) -> TableRun:
    """The final values of a finished master seed's two tables, and the main table's planned cost per cell."""
    from dashboards.compare.cli import read_study
    from dashboards.compare.replicates import replicate_values
    from study.bill import model_epochs
    from study.intake.load import load_plan

    values = []
    for job in (main, twin):
        plan = load_plan(job.spec, job.overrides)
        runs = read_study(str(job.study_dir)).runs
        values.append(replicate_values(runs, _metric(), {c.label: c.replicate for c in plan.cells}))
    plan = load_plan(main.spec, main.overrides)
    cell_epochs = model_epochs(plan) / len(plan.cells)  # a cell × replicate (FIFO: every trial trains fully)
    return TableRun(main.master, values[0], values[1], cell_epochs, replicates)


# ---------------------------------------------------------------------------------------------------------- report


def summary(outcomes: Mapping[str, Mapping[int, Outcome]], skipped: Mapping[str, str]) -> list[str]:
    """Per design: agreement, false verdicts on A-vs-A, cost against (a); then each run's verdicts."""
    baseline = sum(o.cost for o in outcomes.get("a", {}).values())
    lines = [f"{'design':<30} {'agreement':>10} {'A-vs-A false':>13} {'model-epochs':>13} {'vs (a)':>7}"]
    for key, design in DESIGNS.items():
        if key in skipped:
            lines.append(f"({key}) {design.text:<26} skipped: {skipped[key]}")
            continue
        if key not in outcomes:
            continue
        runs = outcomes[key]
        same, total = agreement({m: o.main for m, o in runs.items()})
        wrong, judged = false_verdicts({m: o.aa for m, o in runs.items()})
        cost = sum(o.cost for o in runs.values())
        lines.append(
            f"({key}) {design.text:<26} {same:>4}/{total:<5} {wrong:>6}/{judged:<6} {cost:>13.0f} "
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
        if not all((j.study_dir / R.TABLE_REPORT_FILE).exists() for j in (main_job, twin_job)):
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

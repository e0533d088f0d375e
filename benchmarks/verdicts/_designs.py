"""benchmarks.verdicts' designs: how a finished master seed's verdicts are read under one search per cell, fixed R and
the adaptive rule replayed over the replicates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from benchmarks.verdicts._common import (
    REFERENCE,
    TABLE,
    TWIN,
    Job,
    cells_used,
)

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

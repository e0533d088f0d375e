"""The comparisons over ``search.replicates`` (docs/notebook/tables.md, "The search's own variance"): per comparison (an arm
against the reference on one noise cell) the Δ over replicates and seeds with its crossed replicates × seeds
interval and variance parts (:func:`dashboards.stats.replicated_difference`) and P(A > B) over the replicate pairs
(:func:`dashboards.stats.probability_of_improvement`): what the table's verdicts are decided from
(:mod:`dashboards.compare.verdicts`).

A replicate is one of R independent searches of an arm × condition; its winner's final runs carry its cell's label
as their ``group`` tag (``bspml.p0.2``, ``bspml.p0.2.r1``): the caller maps each label to its replicate index
(:attr:`study.intake.plan.PlanCell.replicate`). A replicate with fewer than 2 final values (its final runs missing or
failed) is left out of its comparisons, which pool the others (:func:`study.final.intervals.left_out_line` says
which, in one line below the verdicts), so that one lost replicate does not remove the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from dashboards import stats
from dashboards.compare.cells import Cell, final_finished, noise_text, reference_cell, run_cell
from dashboards.load import METRIC
from study.final.intervals import left_out_line, left_out_replicates
from trainables.schema import record as R

__all__ = ["ReplicateRow", "replicate_values", "replicate_rows", "replicates_legend"]


@dataclass(frozen=True)
class ReplicateRow:
    """One comparison over replicates: ``cell`` against the reference's ``reference`` cell."""

    cell: Cell
    reference: Cell
    difference: stats.ReplicatedDifference
    #: P(cell > reference) over the replicate pairs and the common seeds.
    improvement: stats.Improvement | None
    #: Replicates pooled (those with 2 or more final values): the cell's, the reference's.
    replicates: tuple[int, int]
    #: One line per side that left a replicate out (:func:`study.final.intervals.left_out_line`).
    left_out: tuple[str, ...] = ()


def replicate_values(
    runs: pl.DataFrame, metric: str, replicate_of: Mapping[str, int]
) -> dict[Cell, list[dict[int, float]]]:
    """Per noise cell, per replicate (every replicate ``replicate_of`` names, in order: a group label → its
    replicate) the final seeds' values of ``metric``, empty for a replicate without finished final runs; a run whose
    group is not in ``replicate_of`` is left out."""
    column = METRIC + metric
    if column not in runs.columns:
        return {}
    held: dict[Cell, dict[int, dict[int, float]]] = {}
    for r in final_finished(runs, column).iter_rows(named=True):
        replicate = replicate_of.get(r[R.GROUP] or "")
        if replicate is not None:
            held.setdefault(run_cell(r), {}).setdefault(replicate, {})[int(r[R.SEED])] = float(r[column])
    every = sorted(set(replicate_of.values()))
    return {cell: [reps.get(k, {}) for k in every] for cell, reps in held.items()}


def _cell_label(cell: Cell) -> str:
    return f"{cell.row} ({noise_text(cell)})"


def _row(cell: Cell, ref: Cell, values: dict[Cell, list[dict[int, float]]]) -> ReplicateRow | None:
    """``cell`` against ``ref`` over the replicates each side pools (``None``: fewer than 2 common seeds)."""
    x, y = values[cell], values[ref]
    diff = stats.replicated_difference(x, y)
    if diff is None:
        return None
    pooled = (len(x) - len(left_out_replicates(x)), len(y) - len(left_out_replicates(y)))
    lines = (left_out_line(_cell_label(c), values[c]) for c in (cell, ref))
    improvement = stats.probability_of_improvement(x, y)
    return ReplicateRow(cell, ref, diff, improvement, pooled, tuple(line for line in lines if line))


def replicate_rows(values: dict[Cell, list[dict[int, float]]], reference: str) -> list[ReplicateRow]:
    """Every cell against the reference's cell for its noise setting (:func:`dashboards.compare.cells.reference_cell`,
    as the comparison pairs them), rows sorted as its tables are, each side pooled over its replicates with 2 or more
    final values; a pair with fewer than 2 common seeds is left out."""
    first = {cell: reps[0] for cell, reps in values.items() if reps}
    rows = []
    for cell in sorted(first, key=lambda c: (c.row, c.noise_kind, c.noise_ratio)):
        ref = reference_cell(first, reference, cell)
        if ref is None or ref == cell:
            continue
        if (row := _row(cell, ref, values)) is not None:
            rows.append(row)
    return rows


def replicates_legend(rows: list[ReplicateRow], reference: str, replicates: int) -> list[str]:
    """The report's paragraph on the replicates under the verdicts: what the replicated Δ is, and one line per
    replicate left out."""
    lines = [
        f"## The search's own variance: {replicates} searches per cell (search.replicates)",
        "",
        f"Each arm × condition was searched {replicates} times with independent sampler seeds and each replicate's "
        f"winner retrained on the same final seeds; the verdicts above are over all of them (the comparison tables "
        f"are replicate 0's, the table as it would have run without replicates: they mark no verdict). Δ = family − "
        f"{reference} over replicates and seeds, 95 % interval: the seeds' paired Δ (their variance / n) plus each "
        "side's replicates (their means' variance over that side's own R: two arms' searches need not vary alike), "
        "each part at its own Student's t quantile (the two sides' replicate parts as one, at Satterthwaite's degrees "
        "of freedom halfway down to the smaller side's, when both have 3 or more replicates; wide at R = 2, as two "
        "searches warrant). A replicate with fewer than 2 final values is left out of its comparisons (said below).",
        "",
    ]
    if not rows:
        return [*lines, "(no comparison with final runs in every replicate)", ""]
    said = list(dict.fromkeys(line for r in rows for line in r.left_out))
    return [*lines, *(part for line in said for part in (line, ""))]

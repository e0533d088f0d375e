"""The search's own variance in a table's report (``search.replicates`` > 1; docs/tables.md, "The search's own
variance"): per comparison (an arm against the reference on one noise cell) the Δ over replicates and seeds with its
crossed replicates × seeds t-interval (:func:`dashboards.stats.replicated_difference`), the share of replicate pairs whose Δ
has its sign, and whether the conclusion holds in every replicate.

A replicate is one of R independent searches of an arm × condition; its winner's final runs carry its cell's label
as their ``group`` tag (``bspml.p0.2``, ``bspml.p0.2.r1``): the caller maps each label to its replicate index
(:attr:`study.intake.plan.PlanCell.replicate`). The comparison tables above this section read replicate 0 only,
which is the table exactly as it would have run without replicates. A replicate with fewer than 2 final values (its
final runs missing or failed) is left out of its comparisons, which pool the others
(:func:`study.final.intervals.left_out_line` says which, in one line below the table), so that one lost replicate
does not remove the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import polars as pl

from dashboards import stats
from dashboards.compare.cells import Cell, final_finished, noise_text, reference_cell, run_cell
from dashboards.compare.render import _f, _interval, _md_table
from dashboards.load import METRIC
from study.final.intervals import left_out_line, left_out_replicates
from trainables.schema import record as R

__all__ = ["ReplicateRow", "replicate_values", "replicate_rows", "render_replicates"]


@dataclass(frozen=True)
class ReplicateRow:
    """One comparison over replicates: ``cell`` against the reference's ``reference`` cell."""

    cell: Cell
    reference: Cell
    difference: stats.ReplicatedDifference
    #: Replicates pooled (those with 2 or more final values): the cell's, the reference's.
    replicates: tuple[int, int]
    #: The replicates whose Δ the per-replicate column gives, in its order (both sides pooled them).
    paired: tuple[int, ...] = ()
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


def _kept(replicates: Sequence[Mapping[int, float]]) -> list[int]:
    out = set(left_out_replicates(replicates))
    return [i for i in range(len(replicates)) if i not in out]


def _row(cell: Cell, ref: Cell, values: dict[Cell, list[dict[int, float]]]) -> ReplicateRow | None:
    """``cell`` against ``ref`` over the replicates each side pools; the per-replicate column pairs replicate r with
    replicate r by index (a replicate left out of either side has no pair)."""
    kept = _kept(values[cell]), _kept(values[ref])
    x, y = [values[cell][i] for i in kept[0]], [values[ref][i] for i in kept[1]]
    diff = stats.replicated_difference(x, y) if x and y else None
    if diff is None:
        return None
    paired = tuple(i for i in kept[0] if i in kept[1])
    seeds = sorted(set.intersection(*(set(v) for v in (*x, *y))))
    per = tuple(
        stats.paired_difference([values[cell][i][s] for s in seeds], [values[ref][i][s] for s in seeds]) for i in paired
    )
    lines = (left_out_line(_cell_label(c), values[c]) for c in (cell, ref))
    return ReplicateRow(
        cell, ref, replace(diff, per_replicate=per), (len(x), len(y)), paired, tuple(line for line in lines if line)
    )


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


def _per_replicate(row: ReplicateRow) -> str:
    """Each pair's Δ; prefixed by its replicate when a replicate was left out (the pairs are then not 0, 1, …)."""
    named = row.paired != tuple(range(len(row.paired)))
    return " / ".join(
        (f"r{i} " if named else "") + _f(d.delta, sign=True) + ("*" if d.low > 0.0 or d.high < 0.0 else "")
        for i, d in zip(row.paired or range(len(row.difference.per_replicate)), row.difference.per_replicate)
    )


def render_replicates(rows: list[ReplicateRow], reference: str, metric: str, replicates: int) -> list[str]:
    """The report's section: one Markdown table row per comparison, and its legend."""
    lines = [
        f"## The search's own variance: {replicates} searches per cell (search.replicates)",
        "",
        f"**{metric}**; the comparison above is replicate 0's. Each arm × condition was searched {replicates} times "
        f"with independent sampler seeds and each replicate's winner retrained on the same final seeds. Δ = family − "
        f"{reference} over replicates and seeds, 95 % interval: the seeds' paired Δ (their variance / n) plus each "
        "side's replicates (their means' variance over that side's own R: two arms' searches need not vary alike), "
        "each part at its own Student's t quantile (the two sides' replicate parts as one, at Satterthwaite's degrees "
        "of freedom halfway down to the smaller side's, when both have 3 or more replicates; wide at R = 2, as two "
        "searches warrant; the paired t-interval at R = 1), * = it excludes 0. A replicate with fewer than 2 final "
        "values is left out of its comparisons (said below the table). "
        f"Same sign: the share of "
        f"(family replicate, {reference} replicate) pairs whose mean Δ over the seeds has Δ's sign. Per replicate: "
        f"replicate r against {reference}'s replicate r, paired over seeds, * = its t 95 % interval excludes 0. "
        "Holds: every replicate gives Δ's sign and its significance.",
        "",
    ]
    header = [R.FAMILY, "noise", "Δ [95 % CI, replicates × seeds]", "same sign", "per replicate", "holds", "n"]
    body = [
        [
            r.cell.row,
            noise_text(r.cell),
            f"{_f(r.difference.delta, sign=True)} {_interval(r.difference.low, r.difference.high, sign=True)}"
            + ("*" if r.difference.significant else ""),
            f"{r.difference.same_sign:.0%} of {r.replicates[0] * r.replicates[1]}",
            _per_replicate(r),
            "yes" if r.difference.holds else "no",
            f"{r.replicates[0]}×{r.replicates[1]} replicates × {r.difference.seeds} seeds",
        ]
        for r in rows
    ]
    if not body:
        return [*lines, "(no comparison with final runs in every replicate)", ""]
    said = list(dict.fromkeys(line for r in rows for line in r.left_out))
    return [*lines, *_md_table(header, body), "", *(part for line in said for part in (line, ""))]

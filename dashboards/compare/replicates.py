"""The search's own variance in a table's report (``search.replicates`` > 1; docs/tables.md, "The search's own
variance"): per comparison (an arm against the reference on one noise cell) the Δ over replicates and seeds with its
crossed replicates × seeds t-interval (:func:`dashboards.stats.replicated_difference`), the share of replicate pairs whose Δ
has its sign, and whether the conclusion holds in every replicate.

A replicate is one of R independent searches of an arm × condition; its winner's final runs carry its cell's label
as their ``group`` tag (``bspml.p0.2``, ``bspml.p0.2.r1``): the caller maps each label to its replicate index
(:attr:`study.intake.plan.PlanCell.replicate`). The comparison tables above this section read replicate 0 only,
which is the table exactly as it would have run without replicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from dashboards import stats
from dashboards.compare.cells import Cell, final_finished, noise_text, reference_cell, run_cell
from dashboards.compare.render import _f, _interval, _md_table
from dashboards.load import METRIC
from trainables.schema import record as R

__all__ = ["ReplicateRow", "replicate_values", "replicate_rows", "render_replicates"]


@dataclass(frozen=True)
class ReplicateRow:
    """One comparison over replicates: ``cell`` against the reference's ``reference`` cell."""

    cell: Cell
    reference: Cell
    difference: stats.ReplicatedDifference
    #: Replicates with final runs: the cell's, the reference's.
    replicates: tuple[int, int]


def replicate_values(
    runs: pl.DataFrame, metric: str, replicate_of: Mapping[str, int]
) -> dict[Cell, list[dict[int, float]]]:
    """Per noise cell, per replicate (in replicate order) the final seeds' values of ``metric``; a run whose group is
    not in ``replicate_of`` (a group label → its replicate) is left out."""
    column = METRIC + metric
    if column not in runs.columns:
        return {}
    held: dict[Cell, dict[int, dict[int, float]]] = {}
    for r in final_finished(runs, column).iter_rows(named=True):
        replicate = replicate_of.get(r[R.GROUP] or "")
        if replicate is not None:
            held.setdefault(run_cell(r), {}).setdefault(replicate, {})[int(r[R.SEED])] = float(r[column])
    return {cell: [reps[k] for k in sorted(reps)] for cell, reps in held.items()}


def replicate_rows(values: dict[Cell, list[dict[int, float]]], reference: str) -> list[ReplicateRow]:
    """Every cell against the reference's cell for its noise setting (:func:`dashboards.compare.cells.reference_cell`,
    as the comparison pairs them), rows sorted as its tables are; a pair with fewer than 2 common seeds is left out."""
    first = {cell: reps[0] for cell, reps in values.items() if reps}
    rows = []
    for cell in sorted(first, key=lambda c: (c.row, c.noise_kind, c.noise_ratio)):
        ref = reference_cell(first, reference, cell)
        if ref is None or ref == cell:
            continue
        diff = stats.replicated_difference(values[cell], values[ref])
        if diff is not None:
            rows.append(ReplicateRow(cell, ref, diff, (len(values[cell]), len(values[ref]))))
    return rows


def _per_replicate(diff: stats.ReplicatedDifference) -> str:
    return " / ".join(_f(d.delta, sign=True) + ("*" if d.low > 0.0 or d.high < 0.0 else "") for d in diff.per_replicate)


def render_replicates(rows: list[ReplicateRow], reference: str, metric: str, replicates: int) -> list[str]:
    """The report's section: one Markdown table row per comparison, and its legend."""
    lines = [
        f"## The search's own variance: {replicates} searches per cell (search.replicates)",
        "",
        f"**{metric}**; the comparison above is replicate 0's. Each arm × condition was searched {replicates} times "
        f"with independent sampler seeds and each replicate's winner retrained on the same final seeds. Δ = family − "
        f"{reference} over replicates and seeds, 95 % interval: Student's t on the seeds' paired Δ (their variance / "
        "n) plus the replicates' (their means' variance pooled over both sides, × Σ 1/R), at the smaller part's degrees "
        "of freedom (wide at R = 2, as two searches warrant; the paired t-interval at R = 1), * = it excludes 0. "
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
            _per_replicate(r.difference),
            "yes" if r.difference.holds else "no",
            f"{r.replicates[0]}×{r.replicates[1]} replicates × {r.difference.seeds} seeds",
        ]
        for r in rows
    ]
    if not body:
        return [*lines, "(no comparison with final runs in every replicate)", ""]
    return [*lines, *_md_table(header, body), ""]

"""A ``search.replicates: {min, max}`` table's verdicts as its rounds froze them.

The driver decides each comparison round by round (:mod:`study.final.sequential`, :mod:`study.search.stages.rounds`):
a comparison decided after round k is frozen there, however many replicates its reference arm runs afterwards for
other comparisons. The report's fixed-design verdict over every replicate present would judge again what was frozen,
at a level the sequential rule did not spend, and could disagree with the decision that stopped the replicates. So on
the primary metric the report shows the frozen decision: its label, its Δ and interval from the look that decided it
(or, still open at ``max``, the last look's, with its minimum detectable effect). P(A > B) stays the pooled one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import polars as pl

from dashboards.compare.rows import Comparison, with_verdicts
from dashboards.compare.verdicts import BETTER, OPEN, WORSE, Verdict, equivalent_label
from study.cell_status import comparison_states
from study.final import sequential as S
from trainables.schema import record as R

if TYPE_CHECKING:
    from study.final.sequential import Decision
    from study.intake.plan import PlanCell, StudyPlan

__all__ = ["round_verdicts", "cell_match", "frozen", "ran_cells"]


def frozen(plan: StudyPlan, comparison: Comparison, margin: float | None) -> Comparison:
    """``comparison`` with the verdicts the rounds froze (:func:`round_verdicts`, the states replayed from the final
    runs: :func:`study.cell_status.comparison_states`); unchanged without ``search.replicates: {min, max}``."""
    if plan.sequential is None:
        return comparison
    verdicts = round_verdicts(comparison.verdicts, comparison_states(plan), plan.every_cell, margin)
    return with_verdicts(comparison, verdicts, replicated=True)


def ran_cells(plan: StudyPlan, runs: pl.DataFrame) -> tuple[PlanCell, ...]:
    """The plan's cells, less, with ``{min, max}``, the replicates no round ran (those are not "left out")."""
    if plan.sequential is None:
        return plan.cells
    ran = set(runs[R.GROUP].unique().to_list())
    return tuple(c for c in plan.cells if c.label in ran)


def cell_match(cell: PlanCell) -> tuple[str, str, float, str]:
    """What a plan cell and a comparison table's cell agree on: family, noise (kind only above ratio 0), subset."""
    noise = cell.spec.dataset.noise
    return (cell.spec.family, noise.kind if noise.ratio > 0 else "", float(noise.ratio), cell.spec.dataset.subset)


def round_verdicts(
    verdicts: Sequence[Verdict],
    states: Mapping[str, Decision],
    cells: Sequence[PlanCell],
    margin: float | None,
) -> list[Verdict]:
    """``verdicts`` with each one the rounds decided replaced by its frozen decision (``states``: by the plan's
    comparison key, :attr:`~study.intake.plan.PlanCell.key`); a verdict with no state is kept as judged."""
    by_match = {cell_match(c): states[c.key] for c in cells if c.key in states}
    out = []
    for verdict in verdicts:
        cell = verdict.evidence.cell
        match = (cell.family, cell.noise_kind if cell.noise_ratio > 0 else "", float(cell.noise_ratio), cell.subset)
        decision = by_match.get(match)
        if decision is None:
            out.append(verdict)
            continue
        label = {S.BETTER: BETTER, S.WORSE: WORSE}.get(decision.state, OPEN)
        if decision.state == S.EQUIVALENT and margin is not None:
            label = equivalent_label(margin)
        evidence = dataclasses.replace(verdict.evidence, delta=decision.delta)
        out.append(
            dataclasses.replace(
                verdict,
                evidence=evidence,
                label=label,
                holm_low=decision.low,
                holm_high=decision.high,
                mde=decision.mde,
                within=decision.state == S.EQUIVALENT,
            )
        )
    return out

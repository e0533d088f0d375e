"""The report of a finished table (``python -m study.run TABLE.yaml`` prints it and writes it to
``<study dir>/table.md`` and the parent run's artifacts): the comparison tables of :mod:`dashboards.compare.cli` over the
table's final stage (the reference arm the spec names), then per cell the search: trials finished / budget, stopped
early, failed (a lost trial is replaced, one whose loss was not finite counts as evaluated), what the cell cost
(model-epochs, wall, GPU-hours on a GPU, the share early stopping saved: study.cell_status), the best validation score and
its parameters with a flag where one sits at an end of its searched range (:func:`study.cell_status.edge_flag`), and
the final seeds retrained. The study directory may be a local path or an object-store URI (``s3://…``).

The report opens with its headline: the table's verdicts, one per comparison (an arm against the reference on one
cell, on the test counterpart of ``search.metric``: :mod:`dashboards.compare.verdicts`), better, worse or not
detectable at this budget, with P(A > B) and the minimum detectable effect; the other test metrics follow as
secondary verdicts. With ``search.replicates`` R > 1 the verdicts are over all R (:mod:`dashboards.compare.replicates`)
and the comparison tables are replicate 0's (the table as it would have run without replicates), unmarked; with
R = 1 the verdicts say that they ignore the search's own variance, and what R = 3 would cost. The parent run gets
each verdict as a tag and its numbers as metrics (:func:`write_table_report`).

A study's report (``study.run`` prints it) ends with the same cost lines (:func:`study_cost_report`): a study is a
table of one arm, its replicates its cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from dashboards.compare.cli import read_study, render_markdown
from dashboards.compare.render import _md_table
from dashboards.compare.replicates import ReplicateRow, replicate_rows, replicate_values, replicates_legend
from dashboards.compare.rounds import frozen, ran_cells
from dashboards.compare.rows import Comparison, build_comparison, with_verdicts
from dashboards.compare.verdicts import (
    Verdict,
    headline,
    judge,
    record,
    replicate_evidence,
    verdict_body,
    verdict_header,
)
from dashboards.expected_best import CellCurve, crossing_line
from dashboards.load import METRIC, DashboardError
from dashboards.select import between_runs, final_runs
from study.bill import Bill, Priced, estimated_hours, model_epochs, priced, size_line
from study.cell_status import CellStatus, SlotUse, cells_status, slot_use, winner_text
from study.console import format_table
from study.intake.plan import StudyPlan
from study.runtime.driver_run import RunWall
from trainables.schema import record as R
from trainables.schema.metric_names import COST_WALL, final_metric

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from study.intake.layout import StudyLayout

__all__ = [
    "table_report",
    "write_table_report",
    "table_verdicts",
    "replicates_cost",
    "SECONDARY",
    "final_wall_s",
    "whole_run_use",
    "bill_against_actual",
    "cost_lines",
    "study_cost_report",
]


#: The other test metrics a table's report gives verdicts on, below its primary one (those its final runs logged).
SECONDARY = ("test/recall_at_1", "test/map_at_r", "test/nmi")


def table_report(
    plan: StudyPlan,
    study_dir: str,
    bill: tuple[Bill | None, RunWall] | None = None,
    cells: list[CellStatus] | None = None,
    stage_lines: Sequence[str] = (),
    curves: Mapping[str, CellCurve] | None = None,
) -> str:
    """Markdown: the verdicts (the headline), the comparison (final stage, paired Δ against the reference arm) and
    the winners per cell; with ``bill`` (the bill priced before the run, the run's wall seconds), the bill against
    the actual cost. ``cells``: :func:`~study.cell_status.cells_status` when the caller read it already (default:
    read here). ``stage_lines``: what the stages after the search reported (:attr:`~study.search.outcome.StudyOutcome.
    stage_lines`: which finalist each cell retrains).
    ``curves``: each cell's expected best validation against its trials (:func:`dashboards.report.cell_curves`):
    whether more trials would change the answer."""
    return _report(plan, study_dir, bill, cells, stage_lines, curves)[0]


def _report(
    plan: StudyPlan,
    study_dir: str,
    bill: tuple[Bill | None, RunWall] | None,
    cells: list[CellStatus] | None,
    stage_lines: Sequence[str],
    curves: Mapping[str, CellCurve] | None = None,
) -> tuple[str, list[Verdict]]:
    """:func:`table_report`'s text and the verdicts on the primary metric (for the parent run)."""
    compared = _comparison(plan, study_dir)
    data = compared.data  # (also read by the bill against the actual cost)
    parts = [f"# Table {plan.name}", "", size_line(plan, None if bill is None else bill[0]), ""]
    if compared.verdicts is not None:
        parts += [f"## Verdicts on {_primary(plan)}", "", *headline(compared.verdicts, plan.replicates)]
        if plan.replicates == 1 and compared.verdicts:
            parts.append(replicates_cost(plan, None if bill is None else bill[0]))
        parts.append("")
    parts += compared.parts
    metric = plan.base.search.objective
    cells = cells_status(plan) if cells is None else cells
    rows = [
        {
            "cell": c.cell.label,
            "finished": f"{c.finished}/{plan.trials_per_cell}",
            "stopped early": c.pruned,
            "failed": c.failed_text(),
            **c.cost_columns(),
            f"best {metric}": "" if c.best_value is None else f"{c.best_value:.4f}",
            "final seeds": c.final_done,
            "winning parameters (an end of the searched range flagged)": winner_text(c),
        }
        for c in cells
    ]
    parts += ["Search winners per cell (each cell's own Optuna study; best trial, ties to the earliest):", ""]
    parts += ["```", format_table(rows, list(rows[0])), "```", ""]
    if reliable := [f"- {c.reliability.line(c.cell.label)}" for c in cells if c.reliability is not None]:
        parts += [
            "How reliable each cell's choice is (its validation classes resampled 1000 times, every candidate on the "
            "same resample; the test classes are never read): P(best), the candidates the bootstrap cannot tell from "
            "the winner, and the rank correlation of the candidates' scores at the last two epochs.",
            "",
            *reliable,
            "",
        ]
    if stage_lines:
        parts += ["```", *stage_lines, "```", ""]
    if lines := budget_lines(plan, curves or {}):
        parts += ["Would more trials change the answer (each cell's expected best validation against its trials):", ""]
        parts += [*(f"- {line}" for line in lines), ""]
    for line in cost_lines(priced(plan), cells, plan.final_with_search, (data, bill)):
        parts += [line, ""]
    return "\n".join(parts), compared.verdicts or []


def budget_lines(plan: StudyPlan, curves: Mapping[str, CellCurve]) -> list[str]:
    """Per cell its budget line (still climbing or flat), then per comparison (an arm against the reference on the
    same condition, each replicate 0) whether the two arms' expected-best curves cross inside the budget: a verdict
    that flips with the budget is not a verdict."""
    lines = [curves[c.label].line() for c in plan.cells if c.label in curves]
    reference = {_condition_key(c): c for c in plan.cells if c.arm == plan.reference and c.replicate == 0}
    for cell in plan.cells:
        ref = reference.get(_condition_key(cell))
        if cell.arm == plan.reference or cell.replicate != 0 or ref is None:
            continue
        a, b = curves.get(cell.label), curves.get(ref.label)
        if a is not None and b is not None and a.curve is not None and b.curve is not None:
            names = (cell.label, ref.label)
            lines.append(
                f"{cell.label} vs {ref.label}: {crossing_line(a.curve.mean, b.curve.mean, names, plan.base.search.mode)}"
            )
    return lines


def _condition_key(cell: Any) -> str:
    return repr(sorted(cell.condition.items()))


def replicates_cost(plan: StudyPlan, bill: Bill | None, replicates: int = 3) -> str:
    """What ``search.replicates`` R would cost this table (:func:`study.bill.model_epochs`,
    :func:`study.bill.estimated_hours`): every cell searched, raced and retrained R times, R × its bill."""
    epochs = model_epochs(plan)
    hours = estimated_hours(plan, None, bill)
    slots = plan.base.search.max_concurrent
    priced_text = "" if hours is None else f", ≈ {replicates * hours:.1f} h on {slots} slots against ≈ {hours:.1f} h"
    return (
        f"`search.replicates: {replicates}` would search every cell {replicates} times and decide each verdict over "
        f"the {replicates} searches: {replicates} × this table's {epochs:.0f} model-epochs = "
        f"{replicates * epochs:.0f}{priced_text}."
    )


def cost_lines(
    priced: Priced, cells: list[CellStatus], finals_in_search: bool, run: tuple[Any, tuple[Bill | None, RunWall] | None]
) -> list[str]:
    """Under a table's report or a study's: the search's slot use; with ``run``'s bill (the bill priced before the
    run, the run's wall seconds) the whole run's slot use and, when there was a bill, the bill against the actual
    cost. ``run``'s data: the study's runs as read (``None`` when they could not be)."""
    data, bill = run
    lines = []
    if (use := slot_use(cells, priced.slots, finals_in_search)) is not None:
        lines.append(use.text())
    if bill is not None and (whole := whole_run_use(cells, data, priced.slots, bill[1])):
        lines.append(whole.text())
    if bill is not None and bill[0] is not None:
        lines.append(bill_against_actual(priced, cells, bill[0], (data, bill[1])))
    return lines


def study_cost_report(
    plan: StudyPlan, root: str, bill: tuple[Bill | None, RunWall], cells: list[CellStatus] | None = None
) -> list[str]:
    """A study's :func:`cost_lines` (its replicates are its cells): read from its stores after the run (``cells``: as
    :func:`table_report`'s)."""
    cells = cells_status(plan) if cells is None else cells
    try:
        data = read_study(root)
    except DashboardError:  # no final stage (final.seeds: 0): the search's share alone
        data = None
    return cost_lines(priced(plan), cells, plan.final_with_search, (data, bill))


@dataclass(frozen=True)
class _Compared:
    """The report's comparison: its Markdown parts, the study's data as read (``None`` when it could not be) and the
    verdicts on the primary metric (``None`` when there was nothing to compare)."""

    parts: list[str]
    data: Any
    verdicts: list[Verdict] | None


def _primary(plan: StudyPlan) -> str:
    """The table's primary metric: the test counterpart of ``search.metric``."""
    return final_metric(plan.base.search.metric)


def _margin(plan: StudyPlan) -> float | None:
    """The table's ``verdict.margin`` (its spec as written), ``None`` where unset."""
    margin = (plan.written.get("verdict") or {}).get("margin")
    return None if margin is None else float(margin)


def table_verdicts(plan: StudyPlan, runs: pl.DataFrame, metric: str) -> tuple[Comparison, list[ReplicateRow]]:
    """The comparison on ``metric`` with its verdicts: over replicate 0's final runs for a table of one search per
    cell; over every replicate (the comparison tables still replicate 0's, unmarked) with ``search.replicates``."""
    higher = plan.base.search.mode == "max"
    first = runs
    if plan.replicates > 1:
        first = runs.filter(pl.col(R.GROUP).is_in([c.label for c in plan.cells if c.replicate == 0]))
    comparison = build_comparison(
        first, plan.reference, metric, studies=[plan.name], margin=_margin(plan), higher_is_better=higher
    )
    if plan.replicates == 1:
        return comparison, []
    values = replicate_values(runs, metric, {c.label: c.replicate for c in ran_cells(plan, runs)})
    rows = replicate_rows(values, plan.reference)
    verdicts = judge(replicate_evidence(rows), metric, margin=_margin(plan), higher_is_better=higher)
    return with_verdicts(comparison, verdicts, replicated=True), rows


def _secondary(plan: StudyPlan, runs: pl.DataFrame) -> list[str]:
    """The verdicts on the other test metrics the final runs logged, one table each (its own Holm correction)."""
    parts = []
    for metric in (m for m in SECONDARY if m != _primary(plan) and METRIC + m in runs.columns):
        try:
            comparison, _ = table_verdicts(plan, runs, metric)
        except DashboardError:
            continue
        if comparison.verdicts:
            body = verdict_body(comparison.verdicts)
            parts += [f"Secondary: verdicts on {metric} (Holm over its own comparisons)", ""]
            parts += [*_md_table(verdict_header(plan.reference), body), ""]
    return parts


def _comparison(plan: StudyPlan, study_dir: str) -> _Compared:
    """The comparison tables with their verdicts (:func:`table_verdicts`), the secondary metrics' verdicts, and with
    replicates what the replicated Δ is; one line instead when there is nothing to compare."""
    try:
        data = read_study(study_dir)
        comparison, rows = table_verdicts(plan, data.runs, _primary(plan))
        comparison = frozen(plan, comparison, _margin(plan))  # {min, max}: the verdicts its rounds froze
        parts = [render_markdown(comparison)]
        if plan.replicates > 1:
            parts += replicates_legend(rows, plan.reference, plan.replicates)
        parts += _secondary(plan, data.runs)
        return _Compared(parts, data, comparison.verdicts)
    except DashboardError as e:
        return _Compared([f"(no comparison: {e})", ""], None, None)


def final_wall_s(data: Any) -> float | None:
    """The final stage's trial time: its finished runs' summed ``cost/wall_s``; ``None`` when the study's data was not
    read or its final runs logged no wall time."""
    return None if data is None else _wall_s(final_runs(data))


def between_wall_s(data: Any) -> float:
    """The trial time of the stages between the search and the final stage (:func:`dashboards.select.between_runs`):
    their runs' summed ``cost/wall_s`` (0 without such a stage, or when the study's data was not read)."""
    return 0.0 if data is None else (_wall_s(between_runs(data)) or 0.0)


def _wall_s(runs: pl.DataFrame) -> float | None:
    column = METRIC + COST_WALL
    return float(runs[column].fill_null(0.0).sum()) if column in runs.columns else None


def whole_run_use(cells: list[CellStatus], data: Any, slots: int, wall: RunWall) -> SlotUse | None:
    """Slot use of the whole run, search and final stage together: the search trials' summed wall (their Optuna
    trials') and the final runs' (MLflow's ``cost/wall_s``) over the slots, against the wall of every driver of the
    run (:class:`~study.runtime.driver_run.RunWall`: a resumed run's earlier drivers too; the line says which).
    ``None`` without the final runs' wall."""
    final = final_wall_s(data)
    if final is None or wall.seconds <= 0:
        return None
    note = "" if wall == RunWall(wall.seconds) else f" (wall: {wall.label()})"
    trials = sum(c.wall_s for c in cells) + between_wall_s(data) + final
    return SlotUse(wall.seconds, trials, slots, "whole-run", note)


def bill_against_actual(priced: Priced, cells: list[CellStatus], bill: Bill, run: tuple[Any, RunWall]) -> str:
    """The bill priced before the run beside what it cost: per stage the trials' summed wall time (the search's from
    its Optuna trials, the final stage's from its MLflow runs) over the slots, and the whole run's wall time."""
    data, wall = run
    slots = priced.slots
    search_h, final_h = priced.stage_hours(bill)
    # The stages between the search and the final stage train search trials: billed with the search.
    search_actual = (sum(c.wall_s for c in cells) + between_wall_s(data)) / slots / 3600.0
    final = final_wall_s(data)
    final_actual = "unknown" if final is None else f"{final / slots / 3600.0:.2f} h"
    return (
        f"Bill against actual ({'measured' if bill.measured else 'assumed'} bill on {slots} slots): search ≈ "
        f"{search_h:.2f} h billed, {search_actual:.2f} h of trial time / {slots}; final stage ≈ {final_h:.2f} h "
        f"billed, {final_actual} of trial time / {slots}; the whole run ≈ {search_h + final_h:.2f} h billed, "
        f"{wall.seconds / 3600.0:.2f} h wall ({wall.label()})"
    )


def write_table_report(
    plan: StudyPlan,
    layout: StudyLayout,
    parent_run_id: str,
    bill: tuple[Bill | None, RunWall] | None = None,
    cells: list[CellStatus] | None = None,
    stage_lines: Sequence[str] = (),
    curves: Mapping[str, CellCurve] | None = None,
) -> tuple[str, str]:
    """Write the report into the study directory (a local path or an object-store URI), log it on the parent run,
    tag the run with the reference family (the dashboard built next compares with it) and with each verdict
    (``verdict/<comparison>``: its line, which ``--status`` prints; its numbers as metrics
    ``verdict/<comparison>/<number>``: :func:`dashboards.compare.verdicts.record`); returns where it was written and
    its text."""
    import tempfile

    from study.runtime.storage import write_bytes
    from study.tracking.doors import mlflow_client

    text, verdicts = _report(plan, layout.root, bill, cells, stage_lines, curves)
    where = layout.table_report
    write_bytes(where, text.encode("utf-8"))
    with tempfile.TemporaryDirectory(prefix="table_report") as scratch:  # MLflow logs a local file
        path = Path(scratch) / R.TABLE_REPORT_FILE
        path.write_text(text, encoding="utf-8")
        client = mlflow_client(layout.tracking_uri)
        client.log_artifact(parent_run_id, str(path))
    client.set_tag(parent_run_id, R.REFERENCE, plan.reference)  # the dashboard compares with it
    if plan.replicates > 1:  # the dashboard shows replicate 0's final runs (its cells' labels: R.replicate_of)
        client.set_tag(parent_run_id, R.REPLICATES, str(plan.replicates))
    tags, metrics = record(verdicts)  # what --status and the dashboard read back
    for key, line in tags.items():
        client.set_tag(parent_run_id, key, line)
    for key, value in metrics.items():
        client.log_metric(parent_run_id, key, value)
    return where, text

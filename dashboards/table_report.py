"""The report of a finished table (``python -m study.run TABLE.yaml`` prints it and writes it to
``<study dir>/table.md`` and the parent run's artifacts): the comparison tables of :mod:`dashboards.compare.cli` over the
table's final stage (the reference arm the spec names), then per cell the search: trials finished / budget, stopped
early, failed (a lost trial is replaced, one whose loss was not finite counts as evaluated), what the cell cost
(model-epochs, wall, GPU-hours on a GPU, the share early stopping saved: study.cell_status), the best validation score and
its parameters with a flag where one sits at an end of its searched range (:func:`study.cell_status.edge_flag`), and
the final seeds retrained. The study directory may be a local path or an object-store URI (``s3://…``).

With ``search.replicates`` R > 1 the comparison tables are replicate 0's (the table as it would have run without
replicates) and a section follows on the search's own variance over all R (:mod:`dashboards.compare.replicates`);
with R = 1 the report is what it was before replicates existed.

A study's report (``study.run`` prints it) ends with the same cost lines (:func:`study_cost_report`): a study is a
table of one arm, its replicates its cells.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from dashboards.compare.cli import read_study, render_markdown
from dashboards.compare.replicates import render_replicates, replicate_rows, replicate_values
from dashboards.compare.rows import build_comparison
from dashboards.load import METRIC, DashboardError
from dashboards.select import final_runs, race_runs
from study.bill import Bill, Priced, priced, size_line
from study.cell_status import CellStatus, SlotUse, cells_status, slot_use, winner_text
from study.console import format_table
from study.intake.plan import StudyPlan
from study.runtime.run_progress import RunWall
from trainables.schema import record as R
from trainables.schema.metric_names import COST_WALL, final_metric

if TYPE_CHECKING:
    from collections.abc import Sequence

    from study.final.race import Standing
    from study.intake.layout import StudyLayout

__all__ = [
    "table_report",
    "write_table_report",
    "race_lines",
    "final_wall_s",
    "whole_run_use",
    "bill_against_actual",
    "cost_lines",
    "study_cost_report",
]


def table_report(
    plan: StudyPlan,
    study_dir: str,
    bill: tuple[Bill | None, RunWall] | None = None,
    cells: list[CellStatus] | None = None,
    race: Sequence[Standing] = (),
) -> str:
    """Markdown: the comparison (final stage, paired Δ against the reference arm) and the winners per cell; with
    ``bill`` (the bill priced before the run, the run's wall seconds), the bill against the actual cost. ``cells``:
    :func:`~study.cell_status.cells_status` when the caller read it already (default: read here). ``race``: the
    finalist race's standings (``final.race``): which finalist each cell retrains."""
    comparison, data = _comparison(plan, study_dir)  # (data: also read by the bill against the actual cost)
    parts = [f"# Table {plan.name}", "", size_line(plan, None if bill is None else bill[0]), "", *comparison]
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
    if lines := race_lines(race, plan.name):
        parts += ["```", *lines, "```", ""]
    for line in cost_lines(priced(plan), cells, plan.final_with_search, (data, bill)):
        parts += [line, ""]
    return "\n".join(parts)


def race_lines(race: Sequence[Standing], name: str) -> list[str]:
    """The finalist race's standings (``final.race``), one line per group: each finalist's mean over its search run
    and its race runs (validation only), the winner marked as the one the final stage retrains."""
    if not race:
        return []
    seeds = max(len(s.race_values) for s in race)
    lines = [f"race: each group's finalists retrained on {seeds} more seeds (validation only); the best mean wins:"]
    for group in dict.fromkeys(s.group for s in race):
        shown = []
        for s in (s for s in race if s.group == group):
            race_values = ", ".join(f"{v:.4f}" for v in s.race_values) or "none finished"
            mark = " (retrained)" if s.winner else ""
            shown.append(
                f"trial {s.source_trial if s.number is None else s.number} {s.mean:.4f}{mark} "
                f"[search {s.search_value:.4f}; race {race_values}]"
            )
        label = name if group in (R.GROUP_ALL, name) else group
        lines.append(f"  {label}: " + "; ".join(shown))
    return lines


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


def _comparison(plan: StudyPlan, study_dir: str) -> tuple[list[str], Any]:
    """The comparison tables (replicate 0's when the table has replicates) and, with replicates, the search's own
    variance over all of them; one line instead when there is nothing to compare. With the study's data read
    (``None`` when it could not be)."""
    try:
        data = read_study(study_dir)
        runs, metric = data.runs, final_metric(plan.base.search.metric)
        if plan.replicates > 1:
            runs = runs.filter(pl.col(R.GROUP).is_in([c.label for c in plan.cells if c.replicate == 0]))
        parts = [render_markdown(build_comparison(runs, plan.reference, metric, studies=[plan.name]))]
        if plan.replicates > 1:
            values = replicate_values(data.runs, metric, {c.label: c.replicate for c in plan.cells})
            rows = replicate_rows(values, plan.reference)
            parts += render_replicates(rows, plan.reference, metric, plan.replicates)
        return parts, data
    except DashboardError as e:
        return [f"(no comparison: {e})", ""], None


def final_wall_s(data: Any) -> float | None:
    """The final stage's trial time: its finished runs' summed ``cost/wall_s``; ``None`` when the study's data was not
    read or its final runs logged no wall time."""
    return None if data is None else _wall_s(final_runs(data))


def race_wall_s(data: Any) -> float:
    """The finalist race's trial time (``final.race``): its runs' summed ``cost/wall_s`` (0 without a race, or when
    the study's data was not read)."""
    return 0.0 if data is None else (_wall_s(race_runs(data)) or 0.0)


def _wall_s(runs: pl.DataFrame) -> float | None:
    column = METRIC + COST_WALL
    return float(runs[column].fill_null(0.0).sum()) if column in runs.columns else None


def whole_run_use(cells: list[CellStatus], data: Any, slots: int, wall: RunWall) -> SlotUse | None:
    """Slot use of the whole run, search and final stage together: the search trials' summed wall (their Optuna
    trials') and the final runs' (MLflow's ``cost/wall_s``) over the slots, against the wall of every driver of the
    run (:class:`~study.runtime.run_progress.RunWall`: a resumed run's earlier drivers too; the line says which).
    ``None`` without the final runs' wall."""
    final = final_wall_s(data)
    if final is None or wall.seconds <= 0:
        return None
    note = "" if wall == RunWall(wall.seconds) else f" (wall: {wall.label()})"
    trials = sum(c.wall_s for c in cells) + race_wall_s(data) + final
    return SlotUse(wall.seconds, trials, slots, "whole-run", note)


def bill_against_actual(priced: Priced, cells: list[CellStatus], bill: Bill, run: tuple[Any, RunWall]) -> str:
    """The bill priced before the run beside what it cost: per stage the trials' summed wall time (the search's from
    its Optuna trials, the final stage's from its MLflow runs) over the slots, and the whole run's wall time."""
    data, wall = run
    slots = priced.slots
    search_h, final_h = priced.stage_hours(bill)
    search_actual = (sum(c.wall_s for c in cells) + race_wall_s(data)) / slots / 3600.0  # the race: the search's
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
    race: Sequence[Standing] = (),
) -> tuple[str, str]:
    """Write the report into the study directory (a local path or an object-store URI), log it on the parent run and
    tag the run with the reference family (the dashboard built next compares with it); returns where it was written
    and its text."""
    import tempfile

    from study.runtime.storage import write_bytes
    from study.tracking.stores import mlflow_client

    text = table_report(plan, layout.root, bill, cells, race)
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
    return where, text

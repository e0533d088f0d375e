"""The comparison's statistics: per row the t-interval, the paired (else Welch) difference to the reference and the
recovered share; per comparison its verdict (:mod:`dashboards.compare.verdicts`: Holm's correction over the table,
P(A > B), the minimum detectable effect), which also marks the rows; across rows IQM; claimed vs honest. Part of
``python -m dashboards.compare``; the formulas are in :mod:`dashboards.stats`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from dashboards import stats
from dashboards.compare.cells import (
    ALPHA,
    Aggregate,
    Cell,
    Cells,
    Claimed,
    Row,
    cell_values,
    clean_reference,
    noise_text,
    reference_cell,
)
from dashboards.compare.verdicts import Verdict, judge, row_evidence
from dashboards.load import METRIC, DashboardData, DashboardError
from dashboards.select import final_runs
from study.final.intervals import t_interval
from trainables.schema.metric_names import TEST_PREFIX, bounds_of

__all__ = [
    "Comparison",
    "compare",
    "aggregates",
    "claimed_vs_honest",
    "build_comparison",
    "with_verdicts",
    "dashboard_comparison",
]


@dataclass
class Comparison:
    """Every table of one comparison: the rows per cell, each comparison's verdict, the aggregates, claimed vs
    honest, and notes."""

    metric: str
    reference: str
    rows: list[Row]
    aggregates: list[Aggregate]
    studies: list[str]
    claimed: list[Claimed] = field(default_factory=list)
    claimed_studies: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: One per comparison (:func:`dashboards.compare.verdicts.judge`): the table's headline.
    verdicts: list[Verdict] = field(default_factory=list)


def compare(values: dict[Cell, dict[int, float]], reference: str, metric: str) -> tuple[list[Row], list[str]]:
    """The table's rows (families sorted, the reference first) and notes on unpaired cells."""
    notes: list[str] = []
    seen: set[tuple[Cell, str]] = set()
    clean = clean_reference(values, reference)
    rows: list[Row] = []
    order = sorted(values, key=lambda c: (c.name != reference, c.row, c.noise_kind, c.noise_ratio))
    for cell in order:
        vals = values[cell]
        mean, std, low, high = t_interval(list(vals.values()), bounds_of(metric))
        diff = share = None
        ref = reference_cell(values, reference, cell)
        if ref is not None and ref != cell:
            diff = stats.difference(vals, values[ref])
            if not diff.paired:
                notes.append(f"{cell.row} {noise_text(cell)}: no matching seeds with {reference}: Welch interval")
            if clean is not None and cell.noise_ratio > 0.0 and ref != clean:
                share = stats.recovered_share(vals, values[ref], values[clean])
                drop = float(np.mean(list(values[clean].values())) - np.mean(list(values[ref].values())))
                if drop <= 0.0 and (ref, "drop") not in seen:
                    seen.add((ref, "drop"))
                    notes.append(
                        f"{reference} did not drop from p=0 to {noise_text(ref)} ({drop:+.3f}): the recovered share "
                        "there has no meaning"
                    )
                if not share[3]:
                    notes.append(f"{cell.row} {noise_text(cell)}: recovered share bootstrapped unpaired")
        rows.append(Row(cell, metric, dict(sorted(vals.items())), mean, std, low, high, diff, share=share))
    adjusted = stats.holm([r.diff.p_value if r.diff else math.nan for r in rows])
    return [
        replace(r, significant=(p < ALPHA) if r.diff and not math.isnan(p) else None, p_holm=p)
        for r, p in zip(rows, adjusted)
    ], notes


def aggregates(values: dict[Cell, dict[int, float]], reference: str) -> list[Aggregate]:
    """Per row: IQM of its scores divided by the clean reference's mean (all its cells, stratified bootstrap)."""
    clean = clean_reference(values, reference)
    if clean is None:
        return []
    norm = float(np.mean(list(values[clean].values())))
    out = []
    for row in dict.fromkeys(c.row for c in sorted(values, key=lambda c: (c.name != reference, c.row))):
        cells = sorted(c for c in values if c.row == row)
        tasks = [[v / norm for v in values[c].values()] for c in cells]
        value = stats.iqm(np.concatenate(tasks))
        ci = stats.stratified_bootstrap_ci(lambda ts: stats.iqm(np.concatenate(ts)), tasks)
        out.append(Aggregate(row, len(cells), value, ci))
    return out


def claimed_vs_honest(honest: Cells, claimed: Cells, metric: str) -> tuple[list[Claimed], list[str]]:
    """Per cell both studies have: claimed (the twin's final stage, selected on test) − honest (final stage selected
    on validation classes), paired by seed: both final stages use seeds 0 … n−1 (and with ``reseed_noise`` the same
    noise draw), so the difference isolates the choice of configuration; Welch where seeds do not match."""
    rows, notes = [], []
    for cell in sorted(set(honest.values) & set(claimed.values), key=lambda c: (c.row, c.noise_kind, c.noise_ratio)):
        diff = stats.difference(claimed.values[cell], honest.values[cell])
        if not diff.paired:
            notes.append(f"claimed vs honest {cell.row} {noise_text(cell)}: no matching seeds: Welch interval")
        same = None
        if cell in honest.configs and cell in claimed.configs:
            same = _without_selection(honest.configs[cell]) == _without_selection(claimed.configs[cell])
        rows.append(Claimed(cell, metric, honest.values[cell], claimed.values[cell], diff, same))
    return rows, notes


def _without_selection(config: str) -> str:
    """A run's config key without the params that differ between an honest study and its twin by construction."""
    params = json.loads(config)
    return json.dumps({k: v for k, v in params.items() if not k.startswith(("validation.", "search.metric"))})


def build_comparison(
    runs: pl.DataFrame,
    reference: str,
    metric: str,
    *,
    claimed_runs: pl.DataFrame | None = None,
    studies: list[str] | None = None,
    claimed_studies: list[str] | None = None,
    margin: float | None = None,
    higher_is_better: bool = True,
) -> Comparison:
    """Every table of one comparison, its verdicts decided on one search per cell (the rows' paired intervals; a
    margin δ adds ``equivalent within ±δ``; ``higher_is_better``: the metric's direction); raises
    :class:`DashboardError` for an unknown reference family or metric."""
    finals = final_runs(DashboardData("", [], runs, pl.DataFrame(), pl.DataFrame(), pl.DataFrame()))
    if METRIC + metric not in finals.columns or finals[METRIC + metric].drop_nulls().is_empty():
        logged = sorted(c.removeprefix(METRIC) for c in finals.columns if c.startswith(METRIC + TEST_PREFIX))
        raise DashboardError(f"--metric: no final run logged {metric!r}; logged: {', '.join(logged) or 'none'}")
    cells = cell_values(runs, metric)
    families = sorted({c.name for c in cells.values})
    if reference not in families:
        raise DashboardError(
            f"--reference: unknown family {reference!r}; families with final runs: {', '.join(families)}"
        )
    rows, notes = compare(cells.values, reference, metric)
    if clean_reference(cells.values, reference) is None:
        notes.append(f"{reference} has no clean (p = 0) final cell: no recovered share or IQM")
    verdicts = judge(row_evidence(cells.values, reference), metric, margin=margin, higher_is_better=higher_is_better)
    comparison = with_verdicts(
        Comparison(metric, reference, rows, aggregates(cells.values, reference), studies or [], notes=notes), verdicts
    )
    if claimed_runs is not None:
        comparison.claimed, claimed_notes = claimed_vs_honest(cells, cell_values(claimed_runs, metric), metric)
        comparison.claimed_studies = claimed_studies or []
        comparison.notes += claimed_notes
        if not comparison.claimed:
            comparison.notes.append("--claimed: the twin study shares no final cell with the honest one")
    return comparison


def with_verdicts(comparison: Comparison, verdicts: list[Verdict], replicated: bool = False) -> Comparison:
    """``comparison`` with ``verdicts`` as its headline and its rows marked by them (``*``: decided, with the verdict's
    Holm-adjusted p-value). ``replicated``: the verdicts are over replicates the rows do not hold (the rows are
    replicate 0's), so no row is marked: a table has one kind of verdict."""
    decided = {v.evidence.cell: v for v in verdicts}
    rows = []
    for r in comparison.rows:
        v = None if replicated else decided.get(r.cell)
        rows.append(
            replace(r, significant=None if v is None else v.decided, p_holm=math.nan if v is None else v.p_holm)
        )
    return replace(comparison, rows=rows, verdicts=verdicts)


def dashboard_comparison(data: DashboardData, metric: str) -> Comparison | None:
    """The comparison of a dashboard's studies (None without final runs of ``metric``): the studies that selected
    on validation classes are the table, those that selected on the test classes (``validation.kind: none``) the
    claimed side; if every study selected on test, they are the table. Reference: a table's own (its parent run's
    ``reference`` tag), else ``ms`` where it ran, else the first family by name (the command line takes any)."""
    test_selected = {s.experiment for s in data.studies if s.selection == "test"}
    honest = data.runs.filter(~pl.col("experiment").is_in(sorted(test_selected)))
    twins = data.runs.filter(pl.col("experiment").is_in(sorted(test_selected)))
    if cell_values(honest, metric).values == {}:
        honest, twins = data.runs, data.runs.clear()
    families = sorted({c.name for c in cell_values(honest, metric).values})
    if not families:
        return None
    named = [s.reference for s in data.studies if s.reference in families]
    reference = named[0] if named else ("ms" if "ms" in families else families[0])
    claimed = twins if cell_values(twins, metric).values else None
    names = [s.experiment for s in data.studies]
    return build_comparison(
        honest,
        reference,
        metric,
        claimed_runs=claimed,
        studies=[n for n in names if n not in test_selected] or names,
        claimed_studies=sorted(test_selected) if claimed is not None else [],
    )

"""Command line: ``python -m dashboards.compare STUDY [STUDY ...] --reference FAMILY [--metric test/recall_at_1]
[--claimed TWIN ...] [--format md|tex|csv] [--out FILE]``.

The papers' comparison tables (BSPML's Table 2 layout: families × noise ratios) from the final stage's runs, with
paired statistics against a reference family: per family and noise cell (kind, ratio, subset) the mean, std and
95 % t-interval over the final seeds; the difference to the reference over matching seeds (Welch where no seeds
match) with a Holm-corrected significance mark; the share of the reference's noise drop the family recovers with a
bootstrap interval; across cells, IQM and probability of improvement (Agarwal et al. 2021). With ``--claimed`` (the
same grid run with ``validation.kind: none``), the optimism of selecting on the test classes per cell.

A STUDY is a spec file or a study directory (``storage/<name>/``, which holds ``spec.yaml``); several studies are
merged by cell (a cell in two studies is taken from the first). The numbers are the final runs' last ``test/``
values as MLflow holds them — what the study stored, never recomputed from models. Statistics: ``dashboards.stats``.
Exit 2 with one line for an unknown study, reference family or metric, or a study without a final stage.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl

from dashboards import stats
from dashboards.load import METRIC, DashboardData, DashboardError
from dashboards.select import final_runs
from schema import record as R
from schema.metric_names import OBJECTIVE, TEST_PREFIX

__all__ = [
    "Cell",
    "Row",
    "Aggregate",
    "Claimed",
    "Comparison",
    "CSV_COLUMNS",
    "CLAIMED_COLUMNS",
    "cell_values",
    "study_labels",
    "compare",
    "claimed_vs_honest",
    "read_study",
    "render_csv",
    "render_markdown",
    "render_latex",
    "text_tables",
    "legend",
    "dashboard_comparison",
    "build_comparison",
    "main",
]

# A noise cell and its metric: the first columns of both tables.
_CELL_COLUMNS = ["family", "noise_kind", "noise_ratio", "subset", "metric", "n_seeds"]
CSV_COLUMNS = [
    *_CELL_COLUMNS,
    "mean",
    "std",
    "ci95_low",
    "ci95_high",
    "delta",
    "delta_ci95_low",
    "delta_ci95_high",
    "delta_significant",
    "recovered_share",
    "recovered_ci95_low",
    "recovered_ci95_high",
]
CLAIMED_COLUMNS = [
    *_CELL_COLUMNS,
    "honest_mean",
    "claimed_mean",
    "optimism",
    "optimism_ci95_low",
    "optimism_ci95_high",
    "paired",
    "same_config",
]
DEFAULT_METRIC = TEST_PREFIX + OBJECTIVE
ALPHA = 0.05
CLEAN_SUBSET = "all"


class Cell(NamedTuple):
    """One row's entry of the table: a family trained on one noise setting and training subset; ``study`` names the
    study (shortened) only when several studies hold the family's cells, else it is empty."""

    family: str
    noise_kind: str
    noise_ratio: float
    subset: str
    study: str = ""

    @property
    def name(self) -> str:
        """The family as the tables name it: ``prism``, or ``prism [prism_given]`` for one of several studies."""
        return f"{self.family} [{self.study}]" if self.study else self.family

    @property
    def row(self) -> str:
        """The table row: the family's name, with its subset when it is not the full (noisy) training set."""
        return self.name if self.subset == CLEAN_SUBSET else f"{self.name} ({self.subset})"

    @property
    def noise(self) -> tuple[str, float]:
        return self.noise_kind, self.noise_ratio


@dataclass(frozen=True)
class Row:
    """One CSV row; ``paired``/``share_paired`` say whether seeds matched (else Welch / independent resampling)."""

    cell: Cell
    metric: str
    values: dict[int, float]
    mean: float
    std: float
    low: float
    high: float
    diff: stats.Difference | None = None
    significant: bool | None = None
    p_holm: float = math.nan
    share: tuple[float, float, float, bool] | None = None

    def csv(self) -> list[str]:
        diff, share = self.diff, self.share
        return [
            self.cell.name,
            self.cell.noise_kind,
            f"{self.cell.noise_ratio:g}",
            self.cell.subset,
            self.metric,
            str(len(self.values)),
            *(_num(v) for v in (self.mean, self.std, self.low, self.high)),
            *((_num(diff.delta), _num(diff.low), _num(diff.high)) if diff else ("", "", "")),
            "" if self.significant is None else str(self.significant).lower(),
            *((_num(share[0]), _num(share[1]), _num(share[2])) if share else ("", "", "")),
        ]


@dataclass(frozen=True)
class Aggregate:
    """Across a family's cells: IQM of scores / clean reference mean, and P(family > reference) over shared cells."""

    row: str
    n_cells: int
    iqm: float
    iqm_ci: tuple[float, float]
    poi: float | None
    poi_ci: tuple[float, float] | None
    poi_cells: int


@dataclass(frozen=True)
class Claimed:
    """One cell of the claimed (selected on test) vs honest table: optimism = claimed − honest."""

    cell: Cell
    metric: str
    honest: dict[int, float]
    claimed: dict[int, float]
    diff: stats.Difference
    same_config: bool | None

    def csv(self) -> list[str]:
        return [
            self.cell.name,
            self.cell.noise_kind,
            f"{self.cell.noise_ratio:g}",
            self.cell.subset,
            self.metric,
            str(self.diff.n),
            _num(float(np.mean(list(self.honest.values())))),
            _num(float(np.mean(list(self.claimed.values())))),
            _num(self.diff.delta),
            _num(self.diff.low),
            _num(self.diff.high),
            str(self.diff.paired).lower(),
            "" if self.same_config is None else str(self.same_config).lower(),
        ]


@dataclass
class Comparison:
    metric: str
    reference: str
    rows: list[Row]
    aggregates: list[Aggregate]
    studies: list[str]
    claimed: list[Claimed] = field(default_factory=list)
    claimed_studies: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _num(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.6g}"


# ---------------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Cells:
    """Per cell the final seeds' values, and the configuration (params without seeds) they retrained."""

    values: dict[Cell, dict[int, float]]
    configs: dict[Cell, str]


def study_labels(names: Sequence[str]) -> dict[str, str]:
    """Each study's short label: its name without the prefix all ``names`` share, cut back to the last ``_``, ``-``
    or ``.`` so no word is split (``noise_grid_prism_given``, ``noise_grid_ms`` → ``prism_given``, ``ms``)."""
    prefix = os.path.commonprefix(list(names)) if len(names) > 1 else ""
    cut = max(prefix.rfind(sep) for sep in "_-.") + 1 if prefix else 0
    return {name: name[cut:] or name for name in names}


def cell_values(runs: pl.DataFrame, metric: str) -> _Cells:
    """The final stage's FINISHED runs of ``runs`` (a ``DashboardData.runs`` frame, several studies allowed) per
    cell and seed. A family that two studies hold on the same noise cell gets one row per study: every cell of that
    family carries its study's label (:func:`study_labels` over the frame's studies)."""
    column = METRIC + metric
    values: dict[Cell, dict[int, float]] = {}
    configs: dict[Cell, str] = {}
    if column not in runs.columns:
        return _Cells(values, configs)
    final = runs.filter(
        (pl.col(R.STAGE) == R.STAGE_FINAL) & (pl.col("status") == "FINISHED") & pl.col(column).is_finite()
    )
    held: dict[tuple[Cell, str], dict[int, float]] = {}
    held_configs: dict[tuple[Cell, str], str] = {}
    for r in final.iter_rows(named=True):
        ratio = float(r["noise_ratio"])
        # At p = 0 the noise kind means nothing (the tag is whatever the spec's default kind was): one clean column.
        kind = (r["noise_kind"] or "none") if ratio > 0.0 else "none"
        key = (Cell(r["family"], kind, ratio, r["subset"] or CLEAN_SUBSET), r["experiment"])
        held.setdefault(key, {})[int(r["seed"])] = float(r[column])
        held_configs[key] = r["config"]
    studies_of: dict[Cell, set[str]] = {}
    for cell, study in held:
        studies_of.setdefault(cell, set()).add(study)
    split = {cell.family for cell, studies in studies_of.items() if len(studies) > 1}
    labels = study_labels(runs["experiment"].unique(maintain_order=True).to_list())
    for (cell, study), vals in held.items():
        labelled = cell._replace(study=labels[study]) if cell.family in split else cell
        values[labelled] = vals
        configs[labelled] = held_configs[(cell, study)]
    return _Cells(values, configs)


def _clean_reference(values: dict[Cell, dict[int, float]], reference: str) -> Cell | None:
    """The reference family's clean cell (p = 0, full training set), whatever noise kind it was tagged with."""
    clean = [c for c in values if c.name == reference and c.noise_ratio == 0.0 and c.subset == CLEAN_SUBSET]
    return sorted(clean)[0] if clean else None


def _reference_cell(values: dict[Cell, dict[int, float]], reference: str, cell: Cell) -> Cell | None:
    """The reference's cell for ``cell``'s noise setting on the full training set (a topline row is compared with
    the reference trained on the noisy labels)."""
    if cell.noise_ratio == 0.0:
        return _clean_reference(values, reference)
    return next((c for c in values if c.name == reference and c.noise == cell.noise and c.subset == CLEAN_SUBSET), None)


def compare(values: dict[Cell, dict[int, float]], reference: str, metric: str) -> tuple[list[Row], list[str]]:
    """The table's rows (families sorted, the reference first) and notes on unpaired cells."""
    notes: list[str] = []
    seen: set[tuple[Cell, str]] = set()
    clean = _clean_reference(values, reference)
    rows: list[Row] = []
    order = sorted(values, key=lambda c: (c.name != reference, c.row, c.noise_kind, c.noise_ratio))
    for cell in order:
        vals = values[cell]
        mean, std, low, high = stats.t_interval(list(vals.values()))
        diff = share = None
        ref = _reference_cell(values, reference, cell)
        if ref is not None and ref != cell:
            diff = stats.difference(vals, values[ref])
            if not diff.paired:
                notes.append(f"{cell.row} {_noise_text(cell)}: no matching seeds with {reference}: Welch interval")
            if clean is not None and cell.noise_ratio > 0.0 and ref != clean:
                share = stats.recovered_share(vals, values[ref], values[clean])
                drop = float(np.mean(list(values[clean].values())) - np.mean(list(values[ref].values())))
                if drop <= 0.0 and (ref, "drop") not in seen:
                    seen.add((ref, "drop"))
                    notes.append(
                        f"{reference} did not drop from p=0 to {_noise_text(ref)} ({drop:+.3f}): the recovered share "
                        "there has no meaning"
                    )
                if not share[3]:
                    notes.append(f"{cell.row} {_noise_text(cell)}: recovered share bootstrapped unpaired")
        rows.append(Row(cell, metric, dict(sorted(vals.items())), mean, std, low, high, diff, share=share))
    adjusted = stats.holm([r.diff.p_value if r.diff else math.nan for r in rows])
    return [
        replace(r, significant=(p < ALPHA) if r.diff and not math.isnan(p) else None, p_holm=p)
        for r, p in zip(rows, adjusted)
    ], notes


def aggregates(values: dict[Cell, dict[int, float]], reference: str) -> list[Aggregate]:
    """Per row: IQM of its scores divided by the clean reference's mean (all its cells, stratified bootstrap) and
    P(row > reference) over the noise settings both have (the reference's own row has no P)."""
    clean = _clean_reference(values, reference)
    if clean is None:
        return []
    norm = float(np.mean(list(values[clean].values())))
    out = []
    for row in dict.fromkeys(c.row for c in sorted(values, key=lambda c: (c.name != reference, c.row))):
        cells = sorted(c for c in values if c.row == row)
        tasks = [np.array(list(values[c].values())) / norm for c in cells]
        value = stats.iqm(np.concatenate(tasks))
        ci = stats.stratified_bootstrap_ci(lambda ts: stats.iqm(np.concatenate(ts)), tasks)
        poi = poi_ci = None
        pairs = [(c, _reference_cell(values, reference, c)) for c in cells]
        pairs = [(c, r) for c, r in pairs if r is not None and r != c]
        if pairs:
            xs = [list(values[c].values()) for c, _ in pairs]
            ys = [list(values[r].values()) for _, r in pairs]
            poi = stats.probability_of_improvement(xs, ys)
            poi_ci = stats.stratified_bootstrap_ci(stats.probability_of_improvement, xs, ys)
        out.append(Aggregate(row, len(cells), value, ci, poi, poi_ci, len(pairs)))
    return out


def claimed_vs_honest(honest: _Cells, claimed: _Cells, metric: str) -> tuple[list[Claimed], list[str]]:
    """Per cell both studies have: claimed (the twin's final stage, selected on test) − honest (final stage selected
    on validation classes), paired by seed: both final stages use seeds 0 … n−1 (and with ``reseed_noise`` the same
    noise draw), so the difference isolates the choice of configuration; Welch where seeds do not match."""
    rows, notes = [], []
    for cell in sorted(set(honest.values) & set(claimed.values), key=lambda c: (c.row, c.noise_kind, c.noise_ratio)):
        diff = stats.difference(claimed.values[cell], honest.values[cell])
        if not diff.paired:
            notes.append(f"claimed vs honest {cell.row} {_noise_text(cell)}: no matching seeds: Welch interval")
        same = None
        if cell in honest.configs and cell in claimed.configs:
            same = _without_selection(honest.configs[cell]) == _without_selection(claimed.configs[cell])
        rows.append(Claimed(cell, metric, honest.values[cell], claimed.values[cell], diff, same))
    return rows, notes


def _without_selection(config: str) -> str:
    """A run's config key without the params that differ between an honest study and its twin by construction."""
    import json

    params = json.loads(config)
    return json.dumps({k: v for k, v in params.items() if not k.startswith(("validation.", "search.metric"))})


def _locate(study: str) -> tuple[str, str]:
    """``(tracking URI, experiment name)`` of a spec file or a study directory."""
    from schema.errors import StudyError
    from study.layout import StudyLayout
    from study.loading import load_spec

    path = Path(study)
    if not path.exists():
        raise DashboardError(f"STUDY: {study}: no such spec file or study directory")
    try:
        if path.is_dir():
            spec_file = path / "spec.yaml"
            if not spec_file.is_file():
                raise DashboardError(f"STUDY: {study}: a study directory holds spec.yaml, this one does not")
            spec = load_spec(str(spec_file), [])
            uri = spec.tracking.uri or f"sqlite:///{(path / 'mlflow.db').resolve()}"
            return uri, spec.name
        spec = load_spec(str(path), [])
    except StudyError as e:
        raise DashboardError(f"STUDY: {study}: {e}") from e
    return StudyLayout.for_spec(spec).tracking_uri, spec.name


def read_study(study: str) -> DashboardData:
    """The runs of one study (no metric histories, no artifacts: the tables need the last values only)."""
    import tempfile

    from dashboards.load import load, resolve_tracking_uri
    from study.credentials import remember

    uri, name = _locate(study)
    try:
        uri = remember(resolve_tracking_uri(uri, [name]))
    except DashboardError as e:
        raise DashboardError(f"STUDY: {study}: {e}") from e
    with tempfile.TemporaryDirectory(prefix="compare") as scratch:
        data = load(uri, [name], Path(scratch), details=False)
    if final_runs(data).is_empty():
        raise DashboardError(f"STUDY: {study}: study {name!r} has no finished final-stage runs (final.seeds: 0?)")
    return data


def _runs(studies: Iterable[DashboardData]) -> pl.DataFrame:
    return pl.concat([d.runs for d in studies], how="diagonal_relaxed")


def build_comparison(
    runs: pl.DataFrame,
    reference: str,
    metric: str,
    *,
    claimed_runs: pl.DataFrame | None = None,
    studies: list[str] | None = None,
    claimed_studies: list[str] | None = None,
) -> Comparison:
    """Every table of one comparison; raises :class:`DashboardError` for an unknown reference family or metric."""
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
    if _clean_reference(cells.values, reference) is None:
        notes.append(f"{reference} has no clean (p = 0) final cell: no recovered share, IQM or P(improvement)")
    comparison = Comparison(metric, reference, rows, aggregates(cells.values, reference), studies or [], notes=notes)
    if claimed_runs is not None:
        comparison.claimed, claimed_notes = claimed_vs_honest(cells, cell_values(claimed_runs, metric), metric)
        comparison.claimed_studies = claimed_studies or []
        comparison.notes += claimed_notes
        if not comparison.claimed:
            comparison.notes.append("--claimed: the twin study shares no final cell with the honest one")
    return comparison


def dashboard_comparison(data: DashboardData, metric: str) -> Comparison | None:
    """The comparison of a dashboard's studies (None without final runs of ``metric``): the studies that selected
    on validation classes are the table, those that selected on the test classes (``validation.kind: none``) the
    claimed side; if every study selected on test, they are the table. Reference: ``ms`` where it ran, else the
    first family by name (the page has no flag to ask for another; the command line does)."""
    test_selected = {s.experiment for s in data.studies if s.selection == "test"}
    honest = data.runs.filter(~pl.col("experiment").is_in(sorted(test_selected)))
    twins = data.runs.filter(pl.col("experiment").is_in(sorted(test_selected)))
    if cell_values(honest, metric).values == {}:
        honest, twins = data.runs, data.runs.clear()
    families = sorted({c.name for c in cell_values(honest, metric).values})
    if not families:
        return None
    reference = "ms" if "ms" in families else families[0]
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


# ---------------------------------------------------------------------------------------------------- rendering


def render_csv(comparison: Comparison) -> str:
    return _csv_text(CSV_COLUMNS, (r.csv() for r in comparison.rows))


def render_claimed_csv(comparison: Comparison) -> str:
    return _csv_text(CLAIMED_COLUMNS, (c.csv() for c in comparison.claimed))


def _csv_text(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue()


def _noise_text(cell: Cell) -> str:
    return "p=0" if cell.noise_ratio == 0.0 else f"{cell.noise_kind} p={cell.noise_ratio:g}"


def _f(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _interval(low: float, high: float, digits: int = 3, sign: bool = False) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f"[{_f(low, digits, sign)}, {_f(high, digits, sign)}]"


def _marks(row: Row) -> str:
    if row.diff is None:
        return ""
    return ("*" if row.significant else "") + ("" if row.diff.paired else "†")


def _layout(rows: list[Row]) -> list[tuple[str, list[tuple[str, float]], list[str]]]:
    """BSPML Table 2's layout, one table per noise kind: ``(kind, columns (kind, ratio), row labels)``; the clean
    column (p = 0) opens every kind's table."""
    clean = sorted({r.cell.noise for r in rows if r.cell.noise_ratio == 0.0})
    kinds = sorted({r.cell.noise_kind for r in rows if r.cell.noise_ratio > 0.0}) or ["none"]
    tables = []
    for kind in kinds:
        columns = clean[:1] + sorted({r.cell.noise for r in rows if r.cell.noise_kind == kind and r.cell.noise_ratio})
        labels = list(dict.fromkeys(r.cell.row for r in rows if r.cell.noise in columns))
        tables.append((kind, columns, labels))
    return tables


def _find(rows: list[Row], label: str, noise: tuple[str, float]) -> Row | None:
    return next((r for r in rows if r.cell.row == label and r.cell.noise == noise), None)


def _md_table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def _column_name(noise: tuple[str, float]) -> str:
    return f"p={noise[1]:g}"


#: One rendered table: caption, header, rows of cell texts (the Markdown output and the dashboard panel share them).
TextTable = tuple[str, list[str], list[list[str]]]


def text_tables(comparison: Comparison) -> list[TextTable]:
    """Every table of a comparison as text cells: per noise kind BSPML Table 2 (families × noise ratios, mean ± std
    [t-CI]) and its Δ / recovered-share twin; the aggregates; claimed vs honest."""
    c, rows = comparison, comparison.rows
    tables: list[TextTable] = []
    for kind, columns, labels in _layout(rows):
        title = f"{kind} noise" if kind != "none" else "no noise"
        header = ["family", *map(_column_name, columns)]
        body = []
        for label in labels:
            cells = [label]
            for noise in columns:
                r = _find(rows, label, noise)
                cells.append(
                    f"{_f(r.mean)} ± {_f(r.std)} {_interval(r.low, r.high)} (n={len(r.values)}){_marks(r)}" if r else ""
                )
            body.append(cells)
        tables.append((f"{title}: {c.metric} mean ± std [95 % t-CI] over the final seeds (n)", header, body))
        body = []
        for label in labels:
            cells = [label]
            for noise in columns:
                r = _find(rows, label, noise)
                if r is None or r.diff is None:
                    cells.append("reference" if label == c.reference and r is not None else "")
                    continue
                text = f"Δ {_f(r.diff.delta, sign=True)} {_interval(r.diff.low, r.diff.high, sign=True)}{_marks(r)}"
                if r.share is not None:
                    text += f" · share {_f(r.share[0], 2, True)} {_interval(r.share[1], r.share[2], 2, True)}"
                cells.append(text)
            body.append(cells)
        caption = f"{title}: Δ = family − {c.reference} [95 % CI, paired over seeds] · recovered share [bootstrap 95 %]"
        tables.append((caption, header, body))
    if c.aggregates:
        body = [
            [
                a.row,
                str(a.n_cells),
                f"{_f(a.iqm)} {_interval(*a.iqm_ci)}",
                f"{_f(a.poi, 2)} {_interval(*a.poi_ci, 2)} ({a.poi_cells} cells)" if a.poi is not None else "—",
            ]
            for a in c.aggregates
        ]
        caption = f"Across cells: IQM of scores / clean {c.reference} mean, P(family > {c.reference}) [stratified bootstrap 95 %]"
        tables.append((caption, ["family", "cells", "IQM", f"P(family > {c.reference})"], body))
    if c.claimed:
        tables.append(_claimed_table(c))
    return tables


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    out = [
        f"**{c.metric}** on the test classes, final stage of {', '.join(c.studies) or 'the studies'}; "
        f"reference family **{c.reference}**.",
        "",
    ]
    for caption, header, body in text_tables(c):
        out += [caption, "", *_md_table(header, body), ""]
    out += [legend(c)]
    out += [f"- note: {n}" for n in c.notes]
    return "\n".join(out) + "\n"


def _claimed_table(c: Comparison) -> TextTable:
    twin = ", ".join(c.claimed_studies) or "the validation.kind: none twin"
    caption = (
        f"Claimed (selected on the test classes: {twin}) vs honest: optimism = claimed − honest "
        "[95 % CI, paired by final seed; † Welch]"
    )
    body = []
    for r in c.claimed:
        honest_mean = float(np.mean(list(r.honest.values())))
        claimed_mean = float(np.mean(list(r.claimed.values())))
        body.append(
            [
                r.cell.row,
                _noise_text(r.cell),
                _f(honest_mean),
                _f(claimed_mean),
                f"{_f(r.diff.delta, sign=True)} {_interval(r.diff.low, r.diff.high, sign=True)}"
                + ("" if r.diff.paired else "†"),
                {True: "same", False: "different", None: "?"}[r.same_config],
            ]
        )
    return caption, ["family", "noise", "honest", "claimed", "optimism", "configuration"], body


def legend(c: Comparison) -> str:
    """The legend under the tables: what every number and mark means."""
    return (
        f"Legend: cells are the final stage's {c.metric}, mean ± sample std and Student's t 95 % interval over the "
        f"final seeds (n). Δ = family − {c.reference} on the same noise setting (a subset row such as `clean_only` "
        f"against {c.reference} on the noisy labels), mean of per-seed differences over the seeds both cells ran, with "
        "its paired t 95 % interval; † = no matching seeds, Welch's interval of the two means instead. * = Δ ≠ 0 after "
        f"Holm's correction over the table's {sum(r.diff is not None for r in c.rows)} comparisons (adjusted p < 0.05; "
        "the shown interval is unadjusted, so it can exclude 0 without a mark). share = (family_p − ref_p) / "
        "(ref_0 − ref_p) of the cells' means, the share of the reference's noise drop the family wins back (1 = all of "
        f"it, 0 = none, < 0 = worse than {c.reference}); its interval is a percentile bootstrap of "
        f"{stats.BOOTSTRAP_SAMPLES} resamples (seed {stats.BOOTSTRAP_SEED}) drawing the same seeds in the three cells "
        "(few seeds: a rough guide). IQM = interquartile mean of all the family's runs' scores divided by the clean "
        "reference's mean; P(family > reference) = per noise setting, the share of (family run, reference run) pairs "
        "the family wins (ties ½), averaged over settings (Agarwal et al., NeurIPS 2021); both with the stratified "
        "bootstrap (runs resampled within each cell)."
    ) + (
        " Claimed vs honest: the final stage of the same cell in the twin study (configurations chosen by their test "
        "score) minus the honest one; both retrain with the same seeds (and noise draws), so the difference is paired "
        "by seed and isolates the choice of configuration (configuration: whether the two choices agree; where they "
        "agree the difference is only run-to-run nondeterminism)."
        if c.claimed
        else ""
    )


_TEX = {
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "−": "$-$",
    "·": r"$\cdot$",
    "—": "--",
    "†": r"$^{\dagger}$",
    "*": r"$^{*}$",
    ">": "$>$",
    "≠": r"$\neq$",
    "½": r"$\frac{1}{2}$",
    "`": "",
}


def _tex(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in text)


def render_latex(comparison: Comparison) -> str:
    """The same tables as :func:`render_markdown`, one ``table`` float each (booktabs), the legend in the last
    caption."""
    c = comparison
    out = [f"% {c.metric}, reference {c.reference}; generated by python -m dashboards.compare"]
    tables = text_tables(c)
    for i, (caption, header, body) in enumerate(tables):
        text = caption + (" " + legend(c) if i == len(tables) - 1 else "")
        out += [
            r"\begin{table}[t]",
            r"\centering\scriptsize",
            r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
            r"\toprule",
            " & ".join(_tex(h) for h in header) + r" \\",
            r"\midrule",
            *(" & ".join(_tex(cell) for cell in row) + r" \\" for row in body),
            r"\bottomrule",
            r"\end{tabular}",
            r"\caption{" + _tex(text) + "}",
            r"\end{table}",
            "",
        ]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------- command line


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _ArgumentParser(prog="python -m dashboards.compare", description="Family × noise comparison tables.")
    p.add_argument("study", nargs="+", help="spec file or study directory (several: merged by cell)")
    p.add_argument("--reference", required=True, help="the family every other is compared with, e.g. ms")
    p.add_argument("--metric", default=DEFAULT_METRIC, help=f"a final-stage test metric (default {DEFAULT_METRIC})")
    p.add_argument(
        "--claimed",
        action="append",
        default=[],
        metavar="TWIN",
        help="the same grid run with validation.kind: none (spec or study dir, repeatable): claimed vs honest table",
    )
    p.add_argument("--format", choices=("md", "tex", "csv"), default="md")
    p.add_argument(
        "--out",
        default=None,
        help="write here instead of stdout (nothing is written on an error); with --format csv and --claimed the "
        "claimed-vs-honest table goes beside it, to <stem>.claimed.csv",
    )
    args = p.parse_args(argv)
    try:
        honest = [read_study(s) for s in args.study]
        twins = [read_study(s) for s in args.claimed]
        comparison = build_comparison(
            _runs(honest),
            args.reference,
            args.metric,
            claimed_runs=_runs(twins) if twins else None,
            studies=[s.experiment for d in honest for s in d.studies],
            claimed_studies=[s.experiment for d in twins for s in d.studies],
        )
    except DashboardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    extra: dict[Path, str] = {}
    if args.format == "csv":
        text = render_csv(comparison)
        if comparison.claimed and args.out:
            extra[Path(args.out).with_suffix(".claimed.csv")] = render_claimed_csv(comparison)
        elif comparison.claimed:
            print("note: --format csv prints the main table only; give --out for the claimed table", file=sys.stderr)
        for note in comparison.notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        text = render_markdown(comparison) if args.format == "md" else render_latex(comparison)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        for path, body in extra.items():
            path.write_text(body, encoding="utf-8")
        print("\n".join([args.out, *map(str, extra)]))
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

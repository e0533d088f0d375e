"""The comparison's renderings: CSV, the text tables (Markdown, and the dashboard's robustness panel), LaTeX
(booktabs), and the legend under them. Part of ``python -m dashboards.compare``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence

import numpy as np

from dashboards import stats
from dashboards.compare.cells import CLAIMED_COLUMNS, CSV_COLUMNS, Row, noise_text
from dashboards.compare.rows import Comparison
from dashboards.compare.verdicts import verdict_body, verdict_caption, verdict_header
from trainables.schema import record as R

__all__ = ["render_csv", "render_claimed_csv", "text_tables", "render_markdown", "render_latex", "legend", "TextTable"]


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


def _f(value: float | None, digits: int = 4, sign: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _interval(low: float, high: float, digits: int = 4, sign: bool = False) -> str:
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
    """Every table of a comparison as text cells: the verdicts first (the headline: one row per comparison); per noise
    kind BSPML Table 2 (families × noise ratios, mean ± std [t-CI]) and its Δ / recovered-share twin; the
    aggregates; claimed vs honest."""
    c, rows = comparison, comparison.rows
    tables: list[TextTable] = []
    if c.verdicts:
        tables.append((verdict_caption(c.verdicts, c.reference), verdict_header(c.reference), verdict_body(c.verdicts)))
    for kind, columns, labels in _layout(rows):
        title = f"{kind} noise" if kind != "none" else "no noise"
        header = [R.FAMILY, *map(_column_name, columns)]
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
        body = [[a.row, str(a.n_cells), f"{_f(a.iqm)} {_interval(*a.iqm_ci)}"] for a in c.aggregates]
        caption = f"Across cells: IQM of scores / clean {c.reference} mean [stratified bootstrap 95 %]"
        tables.append((caption, [R.FAMILY, "cells", "IQM"], body))
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
                noise_text(r.cell),
                _f(honest_mean),
                _f(claimed_mean),
                f"{_f(r.diff.delta, sign=True)} {_interval(r.diff.low, r.diff.high, sign=True)}"
                + ("" if r.diff.paired else "†"),
                {True: "same", False: "different", None: "?"}[r.same_config],
            ]
        )
    return caption, [R.FAMILY, "noise", "honest", "claimed", "optimism", "configuration"], body


def _mark_legend(c: Comparison) -> str:
    """What ``*`` means: the comparison's verdict is decided (better or worse); none where the verdicts are over
    replicates the tables do not hold."""
    if any(v.evidence.replicates != (1, 1) for v in c.verdicts):
        return "The verdicts are over all the table's search replicates; these tables are replicate 0's and mark none."
    return (
        f"* = the verdict is better or worse: Δ ≠ 0 after Holm's correction over the table's {len(c.verdicts)} "
        "comparisons (adjusted p < 0.05; the shown interval is unadjusted, so it can exclude 0 without a mark: the "
        "verdicts' table gives the Holm interval)."
    )


def legend(c: Comparison) -> str:
    """The legend under the tables: what every number and mark means."""
    return (
        f"Legend: cells are the final stage's {c.metric}, mean ± sample std and Student's t 95 % interval over the "
        f"final seeds (n). Δ = family − {c.reference} on the same noise setting (a subset row such as `clean_only` "
        f"against {c.reference} on the noisy labels), mean of per-seed differences over the seeds both cells ran, with "
        "its paired t 95 % interval; † = no matching seeds, Welch's interval of the two means instead. "
        + _mark_legend(c)
        + " share = (family_p − ref_p) / "
        "(ref_0 − ref_p) of the cells' means, the share of the reference's noise drop the family wins back (1 = all of "
        f"it, 0 = none, < 0 = worse than {c.reference}); its interval is a percentile bootstrap of "
        f"{stats.BOOTSTRAP_SAMPLES} resamples (seed {stats.BOOTSTRAP_SEED}) drawing the same seeds in the three cells "
        "(few seeds: a rough guide). IQM = interquartile mean of all the family's runs' scores divided by the clean "
        "reference's mean (Agarwal et al., NeurIPS 2021), with the stratified bootstrap (runs resampled within each "
        "cell)."
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
    "|": r"$|$",
    "×": r"$\times$",
    "α": r"$\alpha$",
    "–": "--",
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

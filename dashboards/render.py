"""The page: one self-contained HTML file (inline CSS, figures as base64 PNG, no script, no network)."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path
from string import Template

from dashboards.load import FINAL_STAGE, DashboardData, StudyInfo
from dashboards.panels import FigureBlock, Panel, TableBlock
from dashboards.select import decimals
from dashboards.template import PAGE
from trainables.schema import record as R

__all__ = ["render_page", "write_figures"]

_TEMPLATE = Template(PAGE)


def _table(block: TableBlock) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in block.table.columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(decimals(v) if isinstance(v, float) or v is None else str(v))}</td>" for v in row)
        + "</tr>"
        for row in block.table.iter_rows()
    )
    # A wide table scrolls inside its own box instead of running off the page.
    return (
        f'<div class="table-box"><table data-table="{block.name}"><caption>{html.escape(block.caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _figure(block: FigureBlock) -> str:
    data = base64.b64encode(block.png).decode("ascii")
    return (
        f'<figure data-figure="{block.name}"><img alt="{html.escape(block.caption)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{html.escape(block.caption)} '
        f"<span class=file>figures/{block.name}.png</span></figcaption></figure>"
    )


def _panel(panel: Panel) -> str:
    parts = [
        f'<section id="{panel.key}" data-panel="{panel.key}"><h2>{html.escape(panel.title)}</h2>',
        f"<p class=intro>{panel.intro}</p>",
    ]
    for block in panel.blocks:
        if isinstance(block, FigureBlock):
            parts.append(_figure(block))
        elif isinstance(block, TableBlock):
            parts.append(_table(block))
        else:
            parts.append(f"<p class=note>{html.escape(block.text)}</p>")
    parts.append("</section>")
    return "\n".join(parts)


def write_figures(panels: list[Panel], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for panel in panels:
        for block in panel.blocks:
            if isinstance(block, FigureBlock):
                path = directory / f"{block.name}.png"
                path.write_bytes(block.png)
                paths.append(path)
    return paths


def _run_counts(data: DashboardData, experiment: str) -> str:
    runs = data.runs.filter(data.runs["experiment"] == experiment)
    final = runs.filter(runs[R.STAGE] == FINAL_STAGE).height
    return f"{runs.height - final} search runs" + (f" + {final} final-stage runs" if final else "")


def _selection_text(study: StudyInfo) -> str:
    if study.selection == R.SELECTION_VALIDATION:
        return f"hyperparameters selected on validation classes ({study.validation or 'validation'})"
    if study.selection == R.SELECTION_TEST:
        return "hyperparameters selected on the test classes"
    return "selection split unknown"


def render_page(data: DashboardData, panels: list[Panel]) -> str:
    drawn = [p for p in panels if p.drawn]
    skipped = [p for p in panels if not p.drawn]
    names = ", ".join(s.experiment for s in data.studies)
    status = "".join(f'<p class="running" data-running="1">{html.escape(n)}</p>' for n in data.running_notes())
    status += "".join(
        f'<p class="selection" data-selection="test">{html.escape(n)}</p>' for n in data.selection_notes()
    )
    status += "".join(f'<p class="replicates">{html.escape(n)}</p>' for n in data.replicate_notes())
    studies = "".join(
        f"<li><b>{html.escape(s.experiment)}</b>: {_run_counts(data, s.experiment)}, study "
        f"{html.escape(s.status or 'without a parent run')}, objective <code>{html.escape(s.metric)}</code> ({s.mode})"
        + f", {html.escape(_selection_text(s))}"
        + (f", study dir <code>{html.escape(s.study_dir)}</code>" if s.study_dir else "")
        + "</li>"
        for s in data.studies
    )
    skipped_html = "".join(
        f'<li data-skipped="{p.key}">{html.escape(p.title)}: {html.escape(p.skipped or "no data")}</li>'
        for p in skipped
    )
    return _TEMPLATE.substitute(
        title=html.escape(f"dmlstudy dashboard: {names}"),
        names=html.escape(names),
        built=time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(data.loaded_at)),
        uri=html.escape(data.tracking_uri),
        status=status,
        studies=studies,
        nav="".join(f'<a href="#{p.key}">{html.escape(p.title)}</a>' for p in drawn),
        panels="\n".join(_panel(p) for p in drawn),
        skipped=f"<h3>Panels not drawn</h3><ul>{skipped_html}</ul>" if skipped else "",
    )

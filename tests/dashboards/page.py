"""Read a built dashboard page back: its panels, figures and tables (stdlib HTML parser, no browser)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path


@dataclass
class Page:
    panels: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)
    #: table name → rows as {header: cell text}
    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    running: bool = False
    #: The page warns that a study selected its hyperparameters on the test classes.
    selection_test: bool = False
    #: figure name → caption text
    captions: dict[str, str] = field(default_factory=dict)
    text: str = ""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.page = Page()
        self._figure: str | None = None
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._header: list[str] = []
        self._text: list[str] = []
        self._caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "data-panel" in a:
            self.page.panels.append(str(a["data-panel"]))
        if "data-skipped" in a:
            self.page.skipped.append(str(a["data-skipped"]))
        if "data-running" in a:
            self.page.running = True
        if a.get("data-selection") == "test":
            self.page.selection_test = True
        if tag == "figure":
            self._figure = a.get("data-figure")
        if tag == "figcaption" and self._figure:
            self._caption: list[str] | None = []
        if tag == "img" and self._figure:
            src = str(a["src"])
            assert src.startswith("data:image/png;base64,"), "figures must be embedded, not fetched"
            self.page.figures[self._figure] = base64.b64decode(src.split(",", 1)[1])
        if tag == "table":
            self._table = a.get("data-table")
            self._header = []
            self.page.tables[str(self._table)] = []
        if tag == "tr":
            self._row = []
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._row is not None and self._table:
            if not self._header:
                self._header = self._row
            else:
                self.page.tables[self._table].append(dict(zip(self._header, self._row)))
            self._row = None
        if tag == "figcaption" and self._figure and self._caption is not None:
            self.page.captions[self._figure] = "".join(self._caption).strip()
            self._caption = None
        if tag == "figure":
            self._figure = None

    def handle_data(self, data: str) -> None:
        if self._caption is not None:
            self._caption.append(data)
        if self._cell is not None:
            self._cell.append(data)
        self._text.append(data)


def read_page(path: Path) -> Page:
    parser = _Parser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.page.text = " ".join(parser._text)
    return parser.page

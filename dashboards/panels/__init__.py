"""Dashboard panels. Each module has ``build(data) -> Panel``; a panel with no blocks is not drawn.

Blocks are figures (matplotlib, Agg, saved as PNG and embedded as base64), tables (polars frames of
strings) and notes. A panel that lacks its data says why in ``skipped``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FigureBlock", "TableBlock", "NoteBlock", "Panel", "new_figure", "png_bytes", "PANEL_MODULES"]

#: Panel modules in page order.
PANEL_MODULES = (
    "leaderboard",
    "validation",
    "robustness",
    "categories",
    "optimisation",
    "expected_best",
    "weights",
    "detectors",
    "noise_theory",
    "paired",
    "curves",
)


@dataclass(frozen=True)
class FigureBlock:
    name: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class TableBlock:
    name: str
    caption: str
    table: pl.DataFrame


@dataclass(frozen=True)
class NoteBlock:
    text: str


Block = FigureBlock | TableBlock | NoteBlock


@dataclass
class Panel:
    key: str
    title: str
    intro: str
    blocks: list[Block] = field(default_factory=list)
    skipped: str = ""

    @property
    def drawn(self) -> bool:
        return any(not isinstance(b, NoteBlock) for b in self.blocks)

    def figure(self, name: str, caption: str, fig: Figure) -> None:
        self.blocks.append(FigureBlock(f"{self.key}_{name}", caption, png_bytes(fig)))

    def table(self, name: str, caption: str, table: pl.DataFrame) -> None:
        self.blocks.append(TableBlock(f"{self.key}_{name}", caption, table))

    def note(self, text: str) -> None:
        self.blocks.append(NoteBlock(text))


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2) -> tuple[Figure, list]:
    """A figure of ``nrows × ncols`` axes (a flat list), drawn by Agg without pyplot's global state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=100, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def png_bytes(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()

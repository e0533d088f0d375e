"""The comparison's data: a noise cell, the rows of its tables and the reading of the final stage's runs per cell.

Part of ``python -m dashboards.compare`` (see its docstring): :mod:`dashboards.compare.cells` (this: cells and rows),
:mod:`dashboards.compare.rows` (the statistics per row and across rows, and the whole comparison),
:mod:`dashboards.compare.verdicts` (a verdict per comparison), :mod:`dashboards.compare.render` (Markdown, LaTeX,
CSV), :mod:`dashboards.compare.cli` (the command line).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from dashboards import stats
from dashboards.load import METRIC
from trainables.schema import record as R
from trainables.schema.metric_names import OBJECTIVE, TEST_PREFIX

__all__ = [
    "Cell",
    "Row",
    "Aggregate",
    "Claimed",
    "Cells",
    "CSV_COLUMNS",
    "CLAIMED_COLUMNS",
    "DEFAULT_METRIC",
    "ALPHA",
    "CLEAN_SUBSET",
    "cell_values",
    "run_cell",
    "final_finished",
    "study_labels",
    "clean_reference",
    "reference_cell",
    "noise_text",
    "num",
]

# A noise cell and its metric: the first columns of both tables.
_CELL_COLUMNS = [R.FAMILY, R.NOISE_KIND, R.NOISE_RATIO, R.SUBSET, "metric", "n_seeds"]
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

    def csv(self, metric: str, n_seeds: int) -> list[str]:
        """The cell's leading CSV columns (``_CELL_COLUMNS``), shared by both tables."""
        return [self.name, self.noise_kind, f"{self.noise_ratio:g}", self.subset, metric, str(n_seeds)]


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
            *self.cell.csv(self.metric, len(self.values)),
            *(num(v) for v in (self.mean, self.std, self.low, self.high)),
            *((num(diff.delta), num(diff.low), num(diff.high)) if diff else ("", "", "")),
            "" if self.significant is None else str(self.significant).lower(),
            *((num(share[0]), num(share[1]), num(share[2])) if share else ("", "", "")),
        ]


@dataclass(frozen=True)
class Aggregate:
    """Across a family's cells: IQM of scores / clean reference mean (each comparison's P(family > reference) is in
    its verdict: :mod:`dashboards.compare.verdicts`)."""

    row: str
    n_cells: int
    iqm: float
    iqm_ci: tuple[float, float]


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
            *self.cell.csv(self.metric, self.diff.n),
            num(float(np.mean(list(self.honest.values())))),
            num(float(np.mean(list(self.claimed.values())))),
            num(self.diff.delta),
            num(self.diff.low),
            num(self.diff.high),
            str(self.diff.paired).lower(),
            "" if self.same_config is None else str(self.same_config).lower(),
        ]


def num(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.6g}"


# ---------------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Cells:
    """Per cell the final seeds' values, and the configuration (params without seeds) they retrained."""

    values: dict[Cell, dict[int, float]]
    configs: dict[Cell, str]


def study_labels(names: Sequence[str]) -> dict[str, str]:
    """Each study's short label: its name without the prefix all ``names`` share, cut back to the last ``_``, ``-``
    or ``.`` so no word is split (``noise_grid_prism_given``, ``noise_grid_ms`` → ``prism_given``, ``ms``)."""
    prefix = os.path.commonprefix(list(names)) if len(names) > 1 else ""
    cut = max(prefix.rfind(sep) for sep in "_-.") + 1 if prefix else 0
    return {name: name[cut:] or name for name in names}


def final_finished(runs: pl.DataFrame, column: str) -> pl.DataFrame:
    """The final stage's FINISHED runs of ``runs`` with a finite ``column``."""
    return runs.filter(
        (pl.col(R.STAGE) == R.STAGE_FINAL) & (pl.col("status") == "FINISHED") & pl.col(column).is_finite()
    )


def run_cell(run: dict) -> Cell:
    """The noise cell of one run (a row of a ``DashboardData.runs`` frame), without its study's label."""
    ratio = float(run[R.NOISE_RATIO])
    # At p = 0 the noise kind means nothing (the tag is whatever the spec's default kind was): one clean column.
    kind = (run[R.NOISE_KIND] or "none") if ratio > 0.0 else "none"
    return Cell(run[R.FAMILY], kind, ratio, run[R.SUBSET] or CLEAN_SUBSET)


def cell_values(runs: pl.DataFrame, metric: str) -> Cells:
    """The final stage's FINISHED runs of ``runs`` (a ``DashboardData.runs`` frame, several studies allowed) per
    cell and seed. A family that two studies hold on the same noise cell gets one row per study: every cell of that
    family carries its study's label (:func:`study_labels` over the frame's studies)."""
    column = METRIC + metric
    values: dict[Cell, dict[int, float]] = {}
    configs: dict[Cell, str] = {}
    if column not in runs.columns:
        return Cells(values, configs)
    held: dict[tuple[Cell, str], dict[int, float]] = {}
    held_configs: dict[tuple[Cell, str], str] = {}
    for r in final_finished(runs, column).iter_rows(named=True):
        key = (run_cell(r), r["experiment"])
        held.setdefault(key, {})[int(r[R.SEED])] = float(r[column])
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
    return Cells(values, configs)


def clean_reference(values: dict[Cell, dict[int, float]], reference: str) -> Cell | None:
    """The reference family's clean cell (p = 0, full training set), whatever noise kind it was tagged with."""
    clean = [c for c in values if c.name == reference and c.noise_ratio == 0.0 and c.subset == CLEAN_SUBSET]
    return sorted(clean)[0] if clean else None


def reference_cell(values: dict[Cell, dict[int, float]], reference: str, cell: Cell) -> Cell | None:
    """The reference's cell for ``cell``'s noise setting on the full training set (a topline row is compared with
    the reference trained on the noisy labels)."""
    if cell.noise_ratio == 0.0:
        return clean_reference(values, reference)
    return next((c for c in values if c.name == reference and c.noise == cell.noise and c.subset == CLEAN_SUBSET), None)


def noise_text(cell: Cell) -> str:
    return "p=0" if cell.noise_ratio == 0.0 else f"{cell.noise_kind} p={cell.noise_ratio:g}"

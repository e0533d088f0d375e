"""Expected best validation vs trials: would more trials change the answer?

Per cell, from its own trials (no extra training): the expected best validation score of a search of k trials,
k = 1 … n, with its band (:mod:`dashboards.expected_best`), and one line: still climbing at n, or flat. Per comparison
of a table (an arm against the reference arm on one condition, the same replicate), whether the two curves cross
inside the budget both ran. The trials are the cells' Optuna trials in the study's ``optuna.db`` (each cell is its own
Optuna study, the labels the report and ``--status`` print), as ``dmlstudy status`` reads them; the tie set's size is
the parent run's ``selection/<cell>/tie_set`` metric.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import polars as pl
from matplotlib.ticker import MaxNLocator

from dashboards.expected_best import CellCurve, crossing_line, of_trials
from dashboards.load import PARAM, DashboardData, StudyInfo
from dashboards.panels import Panel, new_figure
from dashboards.select import search_runs

__all__ = ["build", "study_curves", "cell_label", "TITLE"]

TITLE = "Expected best validation vs trials"
#: At most this many cells share one axes: more are split by condition.
_PER_AXES = 8
_EPOCHS = PARAM + "train.epochs"


def cell_label(experiment: str, optuna_name: str, table: bool) -> str:
    """The cell label of an Optuna study of ``experiment``: a table's ``<name>.<label>``; a study's own name or its
    replicate's ``<name>.r<r>``, which are its labels (:func:`trainables.schema.record.replicate_label`)."""
    return optuna_name.removeprefix(experiment + ".") if table and optuna_name != experiment else optuna_name


def _epochs(data: DashboardData, study: StudyInfo) -> int | None:
    """``train.epochs`` of the study's search runs (every trial logs its config), ``None`` when not logged."""
    runs = search_runs(data).filter(pl.col("experiment") == study.experiment)
    if _EPOCHS not in runs.columns:
        return None
    found = [int(float(v)) for v in runs[_EPOCHS].drop_nulls().to_list()]
    return max(found) if found else None


def _tie_set(study: StudyInfo, label: str) -> int | None:
    """The size of the cell's tie set among its trials that trained every epoch (none at a rung, none unknown)."""
    metrics = study.reliability.get(label, {})
    if "tie_set" not in metrics or "rung_epoch" in metrics or not math.isfinite(metrics["tie_set"]):
        return None
    return int(metrics["tie_set"])


def study_curves(data: DashboardData, study: StudyInfo) -> dict[str, CellCurve]:
    """Per cell label, the cell's :class:`~dashboards.expected_best.CellCurve` from ``study_dir/optuna.db``; empty
    without one. Trials whose last reported epoch is unknown count as trained every epoch when COMPLETE."""
    from study.tracking.doors import load_optuna_study, optuna_study_names

    if study.optuna_db is None:
        return {}
    storage = f"sqlite:///{study.optuna_db}"
    table = study.reference is not None
    out = {}
    for name in sorted(optuna_study_names(storage, study.experiment)):
        trials = load_optuna_study(name, storage).get_trials(deepcopy=False)
        label = cell_label(study.experiment, name, table)
        epochs = _epochs(data, study) or max((max(t.intermediate_values, default=0) for t in trials), default=0)
        out[label] = of_trials(label, trials, epochs, study.mode, _tie_set(study, label))
    return out


def _condition(label: str) -> str:
    """A table cell's condition with its replicate (``bspml.p0.2.r1`` → ``p0.2.r1``)."""
    return label.partition(".")[2] or label


def _groups(curves: dict[str, CellCurve], table: bool) -> Iterator[tuple[str, dict[str, CellCurve]]]:
    """The axes: all cells on one, or (a table with many cells) one per condition."""
    drawn = {k: c for k, c in curves.items() if c.curve is not None}
    if not table or len(drawn) <= _PER_AXES:
        yield "", drawn
        return
    for condition in dict.fromkeys(_condition(k) for k in drawn):
        yield condition, {k: c for k, c in drawn.items() if _condition(k) == condition}


def _figure(panel: Panel, study: StudyInfo, curves: dict[str, CellCurve], metric: str) -> None:
    groups = [(name, group) for name, group in _groups(curves, study.reference is not None) if group]
    if not groups:
        return
    fig, axes = new_figure(min(len(groups), 3), math.ceil(len(groups) / 3), width=4.6, height=3.4)
    for ax, (name, group) in zip(axes, groups):
        for i, (label, cell) in enumerate(group.items()):
            assert cell.curve is not None
            k = range(1, cell.curve.n + 1)
            ax.plot(k, cell.curve.mean, color=f"C{i % 10}", label=f"{label} (n={cell.curve.n})")
            ax.fill_between(k, cell.curve.low, cell.curve.high, color=f"C{i % 10}", alpha=0.18)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trials k")
        ax.set_ylabel(f"expected best {metric}")
        ax.set_title(f"{study.experiment} {name}".strip(), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    panel.figure(
        study.experiment,
        f"{study.experiment}: expected best {metric} of a search of k trials, from each cell's trials that trained "
        "every epoch (band: ± 1.96 bootstrap sd over the trials)",
        fig,
    )


def _row(study: StudyInfo, label: str, cell: CellCurve) -> dict[str, str]:
    row = {"study": study.experiment, "cell": label, "trials": cell.scores.text()}
    c, b = cell.curve, cell.budget
    if c is None or b is None:
        empty = ("E[best of 1]", "E[best of n/2]", "E[best of n] [band]", "rise", "held against", "answer")
        return {**row, **dict.fromkeys(empty, "—")}
    answer = {True: f"still climbing at n = {c.n}", False: f"flat at n = {c.n}", None: "too few trials"}[b.climbing]
    return {
        **row,
        "E[best of 1]": f"{c.mean[0]:.4f}",
        "E[best of n/2]": f"{c.mean[b.half - 1]:.4f} (k = {b.half})",
        "E[best of n] [band]": f"{c.mean[-1]:.4f} [{c.low[-1]:.4f}, {c.high[-1]:.4f}]",
        "rise": f"{b.rise:.4f}",
        "held against": f"{b.threshold:.4f}",
        "answer": answer,
    }


def _comparisons(study: StudyInfo, curves: dict[str, CellCurve]) -> Iterator[str]:
    """Per table comparison (an arm against the reference arm on one condition, the same replicate), one line on
    whether the curves cross. The reference arm is the one named like the parent's reference family."""
    reference = study.reference
    if reference is None:
        return
    for label, cell in curves.items():
        arm, _, condition = label.partition(".")
        ref = curves.get(f"{reference}.{condition}")
        if arm == reference or ref is None or cell.curve is None or ref.curve is None:
            continue
        line = crossing_line(cell.curve.mean, ref.curve.mean, (label, ref.label), study.mode)
        yield f"{study.experiment}: {label} vs {ref.label}: {line}"


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "expected_best",
        TITLE,
        "Would more trials change the answer? Per cell, the expected best validation score of a search of k trials, "
        "k = 1 … n, estimated from the cell's own n trials (no extra training): the best of k draws with replacement "
        "from them (Dodge et al. 2019; the lower-variance estimator of Dodge et al. 2021, which gave the fewest wrong "
        "“which is better” calls), with a band of ± 1.96 bootstrap standard deviations over the trials. "
        "<b>Still climbing at n</b>: the last half of the trials improved the expected best by more than the cell's "
        "tie-set spread (the best score minus the t-th best, t the tie set's size; without a tie set of two or more, "
        "the bootstrap sd of E[best of n]); else <b>flat</b>. It assumes the trials are independent draws: true of "
        "random search; a TPE search's trials after its start-up depend on the earlier ones, so its curve describes "
        "the trials it ran. Under halving or ASHA only the trials that trained every epoch have a full score; the "
        "curve is over those (the table says how many). Where two arms' curves cross inside the budget, which arm is "
        "better depends on the budget.",
    )
    metric = data.metric
    rows = []
    for study in data.studies:
        curves = study_curves(data, study)
        if not curves:
            continue
        _figure(panel, study, curves, metric)
        rows += [_row(study, label, cell) for label, cell in curves.items()]
        for cell in curves.values():
            panel.note(cell.line())
        for line in _comparisons(study, curves):
            panel.note(line)
    if rows:
        panel.table("table", f"{TITLE}: per cell", pl.DataFrame(rows))
    if not panel.drawn:
        panel.skipped = "no study has an Optuna storage (study_dir/optuna.db) with trials that trained every epoch"
    return panel

"""Optimisation: best-so-far vs trial number, Optuna parameter importances (fANOVA on the study's RDB
storage), and a slice view of each searched parameter against the objective."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from dashboards.load import METRIC, PARAM, DashboardData, StudyInfo
from dashboards.panels import Panel, new_figure
from dashboards.select import scored_runs, varying_params
from trainables.schema.trial import param_path

__all__ = ["build", "importances"]

_MAX_SLICES = 8


def importances(study: StudyInfo) -> dict[str, float]:
    """fANOVA importances of the searched parameters from ``study_dir/optuna.db`` (seeded, so repeatable)."""
    import optuna

    from study.tracking.doors import load_optuna_study

    loaded = load_optuna_study(study.experiment, f"sqlite:///{study.optuna_db}")
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    return optuna.importance.get_param_importances(loaded, evaluator=evaluator)


def _numeric(values: list[str | None]) -> np.ndarray | None:
    try:
        return np.array([float(v) if v is not None else math.nan for v in values])
    except ValueError:
        return None


def _searched_columns(data: DashboardData, study: StudyInfo) -> list[tuple[str, str, bool]]:
    """``(label, column, log)`` of each searched parameter; without a recorded space, the varying params."""
    if study.space:
        found = [(name, PARAM + ".".join(param_path(name)), log) for name, log in study.space.items()]
    else:
        found = [(name.removeprefix("params."), PARAM + name, False) for name in varying_params(data)]
    return [f for f in found if f[1] in data.runs.columns]


def _importance_figure(panel: Panel, study: StudyInfo) -> None:
    """The study's fANOVA parameter importances (a bar chart and its table), or a note saying why there are none."""
    if study.optuna_db is None:
        panel.note(f"{study.experiment}: no Optuna storage at study_dir/optuna.db, so no importances.")
        return
    try:
        scores = importances(study)
    except Exception as e:  # noqa: BLE001 - too few trials, a single value per parameter, ...
        panel.note(f"{study.experiment}: parameter importances unavailable ({type(e).__name__}: {e}).")
        return
    if scores:
        names = list(scores)[::-1]
        fig, axes = new_figure(1, height=0.5 + 0.35 * len(names))
        axes[0].barh(names, [scores[n] for n in names], color="C2")
        axes[0].set_xlabel("fANOVA importance")
        panel.figure(f"{study.experiment}_importance", f"{study.experiment}: parameter importances", fig)
        panel.table(
            f"{study.experiment}_importance",
            f"{study.experiment}: importances",
            pl.DataFrame({"parameter": list(scores), "importance": [f"{v:.4f}" for v in scores.values()]}),
        )


def _slice_figure(
    panel: Panel, data: DashboardData, study: StudyInfo, runs: pl.DataFrame, scored: tuple[np.ndarray, np.ndarray]
) -> None:
    """The slice view: the objective (``scored``: values and trial numbers, in start order) against each searched
    parameter, coloured by trial number."""
    values, trial = scored
    metric = data.metric
    slices = [(label, col, log) for label, col, log in _searched_columns(data, study)][:_MAX_SLICES]
    if not slices:
        return
    ncols = min(4, len(slices))
    nrows = math.ceil(len(slices) / ncols)
    fig, axes = new_figure(ncols, nrows, width=3.2, height=2.6)
    for ax, (label, col, log) in zip(axes, slices):
        x = _numeric(runs[col].to_list())
        if x is None:  # categorical: one column of points per choice
            choices = sorted(set(runs[col].to_list()), key=str)
            x = np.array([choices.index(v) for v in runs[col].to_list()], dtype=float)
            ax.set_xticks(range(len(choices)), [str(c) for c in choices], fontsize=7)
        elif log and np.nanmin(x) > 0:
            ax.set_xscale("log")
        points = ax.scatter(x, values, c=trial, cmap="viridis", s=18)
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel(metric, fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(slices) :]:
        ax.set_visible(False)
    fig.colorbar(points, ax=axes[: len(slices)], label="trial number", shrink=0.8)
    panel.figure(f"{study.experiment}_slices", f"{study.experiment}: slice view of the searched parameters", fig)


def build(data: DashboardData) -> Panel:
    panel = Panel(
        "optimisation",
        "Optimisation",
        "How the search went, per study (search-stage runs only): each trial's objective at its last epoch in start order with the "
        "best so far, Optuna's fANOVA parameter importances read from the study's RDB storage "
        "(<code>optuna.db</code>), and a slice view (objective against each searched parameter).",
    )
    metric, maximise = data.metric, data.mode == "max"
    column = METRIC + metric
    for study in data.studies:
        runs = scored_runs(data).filter(pl.col("experiment") == study.experiment).sort("start_time")
        if runs.is_empty():
            continue
        values = runs[column].to_numpy()
        best = np.maximum.accumulate(values) if maximise else np.minimum.accumulate(values)
        trial = np.arange(1, len(values) + 1)
        fig, axes = new_figure(1)
        ax = axes[0]
        ax.scatter(trial, values, s=18, alpha=0.7, label="trial")
        ax.step(trial, best, where="post", color="C3", label="best so far")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial number (start order)")
        ax.set_ylabel(metric)
        ax.set_title(study.experiment, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        panel.figure(f"{study.experiment}_history", f"{study.experiment}: best {metric} so far = {best[-1]:.4f}", fig)

        _importance_figure(panel, study)
        _slice_figure(panel, data, study, runs, (values, trial))
    if not panel.drawn:
        panel.skipped = f"no run reported {metric}"
    return panel

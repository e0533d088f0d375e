"""Where a run stands, per cell, read from its stores without starting anything (:func:`cells_status`; printed by
:mod:`study.status`, reported by :mod:`dashboards.report`). From each cell's Optuna study: the trials finished
(COMPLETE or PRUNED) of its budget, stopped early (PRUNED: the scheduler stopped them) and failed (a table replaces a
lost trial; one whose loss was not finite counts as evaluated: study/search/cell_search.py); the best validation score
and its parameters (a winner at an end of its searched range flagged); what the cell cost (model-epochs, wall time,
GPU-hours on a GPU, the share early stopping saved: each trial's cost is recorded on its Optuna trial when it ends);
how reliable its choice is (:mod:`study.final.reliability`); from MLflow, the final seeds done.

The best trial is :func:`study.final.best.pick_best`'s on the cell's COMPLETE Optuna trials (ties to the earliest).
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from study.final.best import pick_best
from study.final.reliability import Choice, Chosen, of_trials
from study.final.sequential import Decision
from study.intake.layout import StudyLayout
from study.intake.plan import PlanCell, StudyPlan
from study.runtime.storage import read_bytes
from study.search.stages import counted_stages
from study.search.stages.rounds import decisions_of
from study.tracking import peek as tracking_peek
from study.tracking.doors import load_optuna_study, mlflow_client, optuna_storage, optuna_study_names
from trainables.schema import record as R
from trainables.schema.errors import StudyError
from trainables.schema.metric_names import COST_GPU, COST_MODEL_EPOCHS, COST_WALL, final_metric
from trainables.schema.space import CategoricalParam, ParamSpec

__all__ = [
    "CellStatus",
    "SlotUse",
    "cells_status",
    "slot_use",
    "edge_flag",
    "winner_text",
    "EDGE_SHARE",
    "ended_final_values",
    "comparison_states",
]

#: A winner within this share of its range (log scale for ``log: true``) from an end is flagged.
EDGE_SHARE = 0.05


@dataclass(frozen=True)
class CellStatus:
    """Where one cell of a run stands (:func:`cells_status`)."""

    #: The cell: a table's arm on a condition, a study's one search or one of its replicates.
    cell: PlanCell
    #: The cell's Optuna trials per state name (``COMPLETE``, ``PRUNED``, ``FAIL``, ``RUNNING``).
    counts: dict[str, int]
    best_value: float | None
    best_params: dict[str, Any] = field(default_factory=dict)
    #: Per later stage (:func:`~study.search.stages.counted_stages`, by tag), its runs finished: the cell's own, or a study's
    #: over its ``final.group_by`` groups.
    done: dict[str, int] = field(default_factory=dict)
    #: FAIL trials whose loss was not finite: evaluated, not replaced (study/search/cell_search.py).
    nonfinite: int = 0
    #: What the cell's ended trials cost (study/search/cell_search.py records each on its Optuna trial): models × epochs
    #: trained, wall seconds, GPU-seconds (``None`` without a GPU); ``full_model_epochs``: what the same trials
    #: would have cost run to the end.
    model_epochs: float = 0.0
    wall_s: float = 0.0
    gpu_s: float | None = None
    full_model_epochs: float = 0.0
    #: When the cell's first trial was asked and its last one ended (Optuna's times; ``None`` before any).
    span: tuple[datetime, datetime] | None = None
    #: The best trial's Optuna number (``None`` before one completed).
    best_number: int | None = None
    #: How reliable the cell's choice is on its validation classes (:mod:`study.final.reliability`: the chosen
    #: trial's once a stage after the search chose, else the search's best; at the rung that chose under early
    #: stopping; ``None`` before two candidates ended, or without per-class validation results).
    reliability: Choice | None = None
    #: The trial a stage after the search chose for the final stage to retrain (``None``: none chose, or not yet): its
    #: Optuna number and the score it was chosen on (:meth:`~study.search.stages.base.Stage.chosen`).
    chosen: tuple[int, float] | None = None

    @property
    def final_done(self) -> int:
        """Final runs finished."""
        return self.done.get(R.STAGE_FINAL, 0)

    @property
    def finished(self) -> int:
        """Trials that ran to their end: COMPLETE or PRUNED (what a cell's budget is filled with)."""
        return self.counts.get("COMPLETE", 0) + self.counts.get("PRUNED", 0)

    @property
    def pruned(self) -> int:
        return self.counts.get("PRUNED", 0)

    @property
    def failed(self) -> int:
        return self.counts.get("FAIL", 0)

    @property
    def saved(self) -> float | None:
        """The share of model-epochs early stopping saved against running the same trials to the end."""
        return None if self.full_model_epochs <= 0 else 1.0 - self.model_epochs / self.full_model_epochs

    def cost_columns(self) -> dict[str, str]:
        """``model-epochs``, ``wall``, ``GPU-h`` (with a GPU), ``saved``: the cell's bill so far, for the tables."""
        out = {"model-epochs": f"{self.model_epochs:.0f}", "wall": _duration(self.wall_s)}
        if self.gpu_s is not None:
            out["GPU-h"] = f"{self.gpu_s / 3600:.2f}"
        out["saved"] = "" if self.saved is None else f"{self.saved:.0%}"
        return out

    def failed_text(self) -> str:
        """``2`` or ``2 (1 nan)``: FAIL trials, those that count as evaluated (a loss not finite) named."""
        return f"{self.failed} ({self.nonfinite} nan)" if self.nonfinite else str(self.failed)


def _duration(seconds: float) -> str:
    """``41 s``, ``12.5 min``, ``3.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _cost(trials: list[Any], per_trial: float) -> dict[str, Any]:
    """The cost fields of :class:`CellStatus` from a cell's Optuna trials (those that ended and recorded one)."""
    costed = [t.user_attrs for t in trials if COST_MODEL_EPOCHS in t.user_attrs]
    gpu = [a[COST_GPU] for a in costed if COST_GPU in a]
    return {
        "model_epochs": sum(a[COST_MODEL_EPOCHS] for a in costed),
        "wall_s": sum(a.get(COST_WALL, 0.0) for a in costed),
        "gpu_s": sum(gpu) if gpu else None,
        "full_model_epochs": len(costed) * per_trial,
    }


def _span(trials: list[Any]) -> tuple[datetime, datetime] | None:
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    return (min(starts), max(ends)) if starts and ends else None


@dataclass(frozen=True)
class SlotUse:
    """How busy the search kept its slots: its wall time (first trial asked → last trial ended, over every cell)
    against the summed trial wall time divided by the slots (``max_concurrent``). 1.0: every slot busy all the time;
    the goal is ≤ 1.2. A resumed table's wall time includes the time no driver ran. ``what`` names the span:
    ``search``, or ``whole-run`` (search and final stage against the driver's wall: dashboards.table_report)."""

    wall_s: float
    trial_s: float
    slots: int
    what: str = "search"
    #: What the span holds besides (a table's final seeds, started as each cell's search ends).
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.wall_s / (self.trial_s / self.slots) if self.trial_s > 0 else math.nan

    def text(self) -> str:
        return (
            f"{self.what} slot use: {_duration(self.wall_s)} wall for {_duration(self.trial_s)} of trial time on "
            f"{self.slots} slots = {self.ratio:.2f} (1.00: every slot busy throughout){self.note}"
        )


#: The search's slot use when cells start their final seeds as their search ends (study.search.cell_search).
FINALS_IN_SEARCH_NOTE = (
    "; each cell's final seeds start in these slots as its search ends, and this span's trial time leaves them out "
    "(the whole run's slot use counts them)"
)


def slot_use(cells: list[CellStatus], slots: int, finals_in_search: bool = False) -> SlotUse | None:
    """:class:`SlotUse` of the cells' ended trials; ``None`` before any ended. ``finals_in_search``: the table's cells
    start their final seeds as their search ends (:attr:`study.intake.plan.StudyPlan.final_with_search`): said under it."""
    spans = [c.span for c in cells if c.span is not None]
    if not spans:
        return None
    wall = (max(end for _, end in spans) - min(start for start, _ in spans)).total_seconds()
    return SlotUse(wall, sum(c.wall_s for c in cells), slots, note=FINALS_IN_SEARCH_NOTE if finals_in_search else "")


def edge_flag(param: ParamSpec, value: Any) -> str:
    """``"low end"``/``"high end"`` when ``value`` is within :data:`EDGE_SHARE` of its range's end, else ``""``."""
    if isinstance(param, CategoricalParam) or not isinstance(value, (int, float)) or param.high <= param.low:
        return ""
    low, high, v = float(param.low), float(param.high), float(value)
    if param.log:
        low, high, v = math.log(low), math.log(high), math.log(v)
    share = (v - low) / (high - low)
    return "low end" if share <= EDGE_SHARE else ("high end" if share >= 1 - EDGE_SHARE else "")


def _finished_per_group(layout_uri: str, name: str, stage: str) -> Counter[str]:
    """FINISHED trial runs of ``stage`` (a stage's tag: ``final``, ...) per group."""
    runs = tracking_peek.runs_of(
        layout_uri,
        name,
        f"tags.`{R.ROLE_TAG}` = '{R.ROLE_TRIAL}' and tags.`{R.STAGE}` = '{stage}' and attributes.status = 'FINISHED'",
    )
    return Counter(r.data.tags.get(R.GROUP, "") for r in runs or [])


def cells_status(plan: StudyPlan) -> list[CellStatus]:
    """Per cell of the run: Optuna trial states, the best trial, each later stage's runs done, the trial a stage
    chose, what it cost. Raises :class:`StudyError` when the run has never been started."""
    base, per_trial = plan.base, plan.trial_model_epochs
    layout = StudyLayout.for_spec(base)
    if read_bytes(layout.spec_file) is None:
        raise StudyError(f"there is no {plan.noun} {base.name!r} in {layout.root}")
    storage = optuna_storage(layout.optuna_url)
    names = set(optuna_study_names(storage, base.name))
    later = counted_stages(plan)
    finished = {s.tag: _finished_per_group(layout.tracking_uri, base.name, s.tag) for s in later}
    chosen: dict[str, tuple[int, float]] = {}
    chooser = next((s for s in later if s.winner_name), None)
    if chooser is not None:
        chosen = chooser.chosen(plan, lambda path: _parent_file(layout.tracking_uri, plan.name, path))
    out = []
    for cell in plan.cells:
        trials = []
        if cell.study_name in names:
            trials = load_optuna_study(cell.study_name, storage).get_trials(deepcopy=False)
        complete = [t for t in trials if t.state.name == "COMPLETE"]
        best = pick_best(complete, lambda t: t.value, lambda t: t.number, base.search.mode)
        picked = chosen.get(cell.label)
        out.append(
            CellStatus(
                cell,
                dict(Counter(t.state.name for t in trials)),
                None if best is None else best.value,
                {} if best is None else dict(best.params),
                {
                    tag: runs.get(cell.label, 0) if plan.groups_are_cells else sum(runs.values())
                    for tag, runs in finished.items()
                },
                sum(t.user_attrs.get(R.OPTUNA_FAILURE) == R.FAILURE_NONFINITE for t in trials),
                **_cost(trials, per_trial),
                span=_span(trials),
                best_number=None if best is None else best.number,
                reliability=of_trials(
                    trials,
                    base.search.mode,
                    base.train.epochs,
                    None if picked is None or chooser is None else Chosen(picked[0], chooser.winner_name),
                ),
                chosen=picked,
            )
        )
    return out


def _parent_file(uri: str, name: str, path: str) -> str | None:
    """The text of the artifact ``path`` of run ``name``'s parent MLflow run (``None``: no parent, or no such file)."""
    parents = tracking_peek.runs_of(
        uri, name, f"tags.`{R.ROLE_TAG}` = '{R.ROLE_STUDY}'", order_by=["start_time DESC"], max_results=1
    )
    if not parents:
        return None
    client = mlflow_client(uri)
    run_id = parents[0].info.run_id
    if path not in {a.path for a in client.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        return Path(client.download_artifacts(run_id, path, scratch)).read_text()


def winner_text(status: CellStatus) -> str:
    """``ms_alpha=2.31, ms_beta=48.2 (high end)``: the cell's best parameters, edge flags beside them."""
    space = status.cell.spec.search.space
    parts = []
    for name, value in status.best_params.items():
        flag = edge_flag(space[name], value) if name in space else ""
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{name}={shown}" + (f" ({flag})" if flag else ""))
    return ", ".join(parts)


def ended_final_values(plan: StudyPlan) -> dict[str, dict[int, float]]:
    """Per cell label whose final stage has ended (a run FINISHED or FAILED for each of its ``final.seeds``), its
    FINISHED runs' values of the final test metric by seed: what the rounds of ``search.replicates: {min, max}`` judge
    (:func:`study.search.stages.rounds.decisions_of`). A cell still running its final seeds is left out."""
    layout = StudyLayout.for_spec(plan.base)
    metric = final_metric(plan.base.search.metric)
    query = f"tags.`{R.ROLE_TAG}` = '{R.ROLE_TRIAL}' and tags.`{R.STAGE}` = '{R.STAGE_FINAL}'"
    ended: dict[str, set[int]] = {}
    values: dict[str, dict[int, float]] = {}
    for run in tracking_peek.runs_of(layout.tracking_uri, plan.name, query) or []:
        label, seed = run.data.tags.get(R.GROUP, ""), int(run.data.tags.get(R.SEED, "-1"))
        if run.info.status not in ("FINISHED", "FAILED"):
            continue
        ended.setdefault(label, set()).add(seed)
        value = run.data.metrics.get(metric)
        if run.info.status == "FINISHED" and value is not None and math.isfinite(value):
            values.setdefault(label, {})[seed] = float(value)
    return {label: values.get(label, {}) for label, seeds in ended.items() if len(seeds) >= plan.base.final.seeds}


def comparison_states(plan: StudyPlan) -> dict[str, Decision]:
    """With ``search.replicates: {min, max}``, every comparison's state as the driver decides it, replayed from the
    final runs that ended (:func:`ended_final_values`); a comparison not looked at yet is absent. Empty otherwise."""
    if plan.sequential is None or not plan.comparisons:
        return {}
    return decisions_of(plan, ended_final_values(plan))

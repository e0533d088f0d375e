"""Early stopping per cell: :class:`CellASHA`, one ASHA rung set per cell of the run's plan (:mod:`study.intake.plan`: a
table's arm × condition cells, a study's one), so a trial is compared only with trials of its own cell (docs/notebook/tables.md,
"Multi-fidelity per cell").

Why by hand: Ray's ``ASHAScheduler`` keeps one rung set for every trial of an experiment, and a table's one experiment
(study/search/cell_search.py) holds every cell's trials; one ASHA over them would stop a noisy cell's trials for scoring
below a clean cell's, and the arms would no longer get the same search. Hyperband's several brackets are left out
on purpose: a cell has 8-16 trials, and splitting those across brackets would leave each bracket's rungs a handful
of values, a cutoff that is mostly noise; one bracket (ASHA) gives every trial of a cell the same grace period.

What it keeps per cell is Ray's own ASHA (the cutoff rule, a trial recorded at most once per rung), fed only that
cell's trials. Every cell gets the same ``grace_period``, ``reduction_factor`` and ``max_t`` (the table's
``search.scheduler``; an arm cannot set its own, trainables/schema/table.py). Decisions read the search metric (a
``val/`` name; a table with a scheduler must validate), which with k-fold validation is the mean over the folds,
trained in lockstep (trainables/loop/run.py), so a rung is decided on every fold at that epoch. A stopped trial ends
without error: the table's searcher counts it as evaluated, and :class:`~study.search.study_search.StudySearch` tells
Optuna PRUNED with its last value, so TPE learns from it.

Its state (every cell's rungs with every recorded value, and each live trial's cell) is written to the study
directory whenever a decision changed it, as versioned JSON (:mod:`study.search.scheduler_state`), and read back the
first time a restored driver calls it: Ray restores a scheduler from the pickle taken at the experiment's start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from study.runtime.compat import asha_rungs, asha_trial_info
from study.runtime.shells import PickledAsArguments
from study.search import scheduler_state
from trainables.schema.trial import CELL_KEY, FINAL_KEY

__all__ = ["CellASHA", "Rungs", "cell_label_of", "rung_values"]


@dataclass(frozen=True)
class Rungs:
    """Ray's ASHA arguments, the same for every cell: the search ``metric`` (a validation metric) and its ``mode``;
    ``max_t``, ``grace_period`` and ``reduction_factor`` in epochs (``training_iteration``: the trainable reports once
    per epoch)."""

    metric: str
    mode: str
    max_t: int
    grace_period: int
    reduction_factor: float


def cell_label_of(cells: list[tuple[str, dict[str, Any]]], config: dict[str, Any]) -> str | None:
    """The label of the trial's cell: the one its config is stamped with (:data:`~trainables.schema.trial.CELL_KEY`);
    for a trial asked before cells were stamped, the cell whose fixed values it carries (:meth:`study.intake.plan.StudyPlan.cell_of`'s
    rule, on the ``(label, fixed)`` pairs this scheduler keeps: small to pickle at every decision). A final trial that
    runs in the search's experiment (:class:`~study.search.cell_search.CellSearch`) belongs to no cell: it runs to the end."""
    if FINAL_KEY in config:
        return None
    stamped = config.get(CELL_KEY)
    if stamped is not None:
        return stamped if any(label == stamped for label, _ in cells) else None
    for label, fixed in cells:
        if all(config.get(k) == v for k, v in fixed.items()):
            return label
    return None


def rung_values(scheduler: CellASHA) -> dict[str, dict[float, dict[str, float]]]:
    """Every cell's rungs: label → milestone → {Ray trial id: recorded value, sign-adjusted (larger is better)}."""
    return {label: {m: dict(r) for m, r in asha_rungs(s).items()} for label, s in scheduler.per_cell.items()}


class CellASHA(PickledAsArguments, FIFOScheduler):
    """ASHA with separate rungs per table cell, persisted in ``state_file``.

    Args:
        cells: each cell's ``(label, fixed values)``; a trial belongs to the cell its config is stamped with
            (:func:`cell_label_of`).
        rungs: Ray's ASHA arguments, the same for every cell.
        state_file: where the rungs are kept across driver restarts (the study's ``scheduler_state.json``).
    """

    #: The ``kind`` its state file and Ray's pickle of it record (:data:`study.runtime.shells.KINDS`).
    KIND = "cell_asha"

    def __init__(self, cells: list[tuple[str, dict[str, Any]]], rungs: Rungs, state_file: str) -> None:
        super().__init__()
        self.cells = cells
        self.rungs = rungs
        self._metric, self._mode = rungs.metric, rungs.mode
        self.per_cell: dict[str, ASHAScheduler] = {
            label: ASHAScheduler(
                time_attr="training_iteration",
                metric=rungs.metric,
                mode=rungs.mode,
                max_t=rungs.max_t,
                grace_period=min(rungs.grace_period, rungs.max_t),
                reduction_factor=rungs.reduction_factor,
            )
            for label, _ in cells
        }
        #: Ray trial id → its cell's label, for every trial this scheduler was given.
        self.trial_cell: dict[str, str] = {}
        self.state_file = state_file
        self._loaded = False
        self._saved: tuple[int, ...] | None = None

    def arguments(self) -> dict[str, Any]:
        cells = [[label, dict(fixed)] for label, fixed in self.cells]
        return {"cells": cells, "rungs": dataclasses.asdict(self.rungs), "state_file": self.state_file}

    @classmethod
    def from_arguments(cls, cells: list[list[Any]], rungs: dict[str, Any], state_file: str) -> CellASHA:
        return cls([(label, fixed) for label, fixed in cells], Rungs(**rungs), state_file)

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        # The table passes its own metric and mode to TuneConfig as well: the same ones, so nothing to refuse.
        return metric in (None, self._metric) and mode in (None, self._mode)

    # ------------------------------------------------------------------------------------------------ persistence

    def _load_once(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        fields = scheduler_state.read_state(self.state_file, self.KIND, scheduler_state.cell_asha_legacy)
        if fields is not None:
            path, _ = scheduler_state.state_paths(self.state_file)
            self.trial_cell = scheduler_state.restore_cell_asha(self.per_cell, fields, path)
            self._saved = self._fingerprint()

    def _fingerprint(self) -> tuple[int, ...]:
        """What a decision can change: values recorded per rung and live trials, per cell (values are never
        rewritten: a trial is recorded once per rung)."""
        out: list[int] = [len(self.trial_cell)]
        for scheduler in self.per_cell.values():
            out.append(len(asha_trial_info(scheduler)))
            out += [len(recorded) for recorded in asha_rungs(scheduler).values()]
        return tuple(out)

    def _persist(self) -> None:
        """Write the state when a decision changed it: a result between rungs changes nothing, and an epoch's
        result then costs the driver no write."""
        fingerprint = self._fingerprint()
        if fingerprint != self._saved:
            fields = scheduler_state.cell_asha_fields(self.per_cell, self.trial_cell)
            scheduler_state.write_state(self.state_file, self.KIND, fields)
            self._saved = fingerprint

    # --------------------------------------------------------------------------------------- Ray's scheduler calls

    def _cell(self, trial: Any) -> ASHAScheduler | None:
        label = self.trial_cell.get(trial.trial_id)
        return None if label is None else self.per_cell[label]

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        if trial.trial_id in self.trial_cell:  # a restored live trial keeps its cell and rungs
            return
        label = cell_label_of(self.cells, trial.config)
        if label is None:  # not a cell's trial (the table's searcher makes none): it runs to the end
            return
        self.trial_cell[trial.trial_id] = label
        self.per_cell[label].on_trial_add(tune_controller, trial)
        self._persist()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        self._load_once()
        scheduler = self._cell(trial)
        if scheduler is None or trial.trial_id not in asha_trial_info(scheduler):
            return TrialScheduler.CONTINUE
        decision = scheduler.on_trial_result(tune_controller, trial, result)
        self._persist()
        return decision

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._load_once()
        scheduler = self._cell(trial)
        if scheduler is not None and trial.trial_id in asha_trial_info(scheduler):
            scheduler.on_trial_complete(tune_controller, trial, result)
            asha_trial_info(scheduler).pop(trial.trial_id, None)  # Ray's keeps it when the result lacks the metric
            self._persist()

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        scheduler = self._cell(trial)
        if scheduler is not None:
            asha_trial_info(scheduler).pop(trial.trial_id, None)
            self._persist()

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        return "CellASHA: " + "; ".join(f"{label}: {s.debug_string()}" for label, s in self.per_cell.items())

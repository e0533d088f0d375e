"""Synchronous successive halving per cell (``search.scheduler.type: halving``; docs/notebook/tables.md, "Synchronous
successive halving"): :class:`HalvingScheduler`, and the rule it applies, :func:`kept_at_rung`.

Why not ASHA: asynchronous ASHA (Ray's ``ASHAScheduler``, Optuna's ``SuccessiveHalvingPruner``) decides a trial the
moment it reaches a rung, against the values recorded there before it, and promotes the first one unconditionally;
at 8-16 trials a cell, which trials a cell keeps then depends on the order they arrive (measured on the glyphs table:
one cell's first trial went through every rung, its others stopped at epoch 1). Here a cell's rung waits until every
trial of the cell has reported at it, then keeps the best :func:`kept_count` of them: the decision is a function of
the values alone, and every arm's cells keep the same number of trials at every rung.

The rule, precisely:

- Rungs are at epochs ``⌈first_rung · η^k⌉ < max_t`` (:func:`halving_rungs`); ``training_iteration`` is the epoch
  (the trainable reports once per epoch), and a trial's value at a rung is the search metric of its first result at
  or past the rung's epoch (that epoch's: every epoch reports).
- Of the ``n`` trials at a rung it keeps ``max(⌈n / η⌉, min(hedge, n))`` (:func:`kept_count`): ``hedge`` trials of
  every cell always run to the end, the best ``hedge`` at each rung.
- Ranking: the better value first (``mode``); a missing or non-finite value ranks last; ties go to the trial the cell
  was given first (the order the scheduler was given the cell's trials, which is the order its searcher asked them:
  their Optuna numbers), never to the one that arrived first.
- Population. Rung 0 of a cell waits for the cell's budget of trials (``num_trials`` a cell: ones not asked yet
  included): it is decided once ``budget`` of its trials have reached it or ended before it, and none of its live
  trials is still below it. Rung k > 0 waits for the trials rung k − 1 kept. A trial that ends without a decision
  (an error, a removal) leaves the population: it is not waited for and not ranked. A trial that reaches a rung
  already decided (only a replacement the table's searcher asked for a trial lost before rung 0 can) is kept if it
  ranks above the worst trial the rung kept, else stopped; nobody else's decision changes.
- A trial reaching an undecided rung is PAUSED (Ray keeps the checkpoint of its last report and frees its slot);
  when the rung is decided the kept ones resume from that checkpoint (:meth:`choose_trial_to_run` returns them, before
  any PENDING trial: a promoted trial carries its cell to its next barrier, and paused checkpoints do not pile up) and
  the others are stopped. That checkpoint is the model that was ranked: the trainable checkpoints every rung epoch,
  whatever ``train.checkpoint_every`` says (:meth:`~trainables.schema.scheduler.halving.HalvingSpec.checkpoint_epochs`); without it a kept
  trial retrained from its last checkpoint before the rung (measured: epochs 1, 2, 1, 2, 3, 4 with
  ``checkpoint_every: 3``, a rung at 2). A stopped trial ends without error: the searcher tells Optuna PRUNED, whose
  value is the last intermediate one, the value at the rung.
- Slots. ``max_concurrent`` is Ray's ``ConcurrencyLimiter``, which counts a PAUSED trial as live: a trial waiting
  at a barrier is taken out of its count (:func:`study.runtime.compat.release_concurrency`), so other cells' trials,
  and the cell's own not yet asked, take the slot; a kept trial is counted again as soon as it is promoted, so a new
  trial does not take the slot it will resume in. No deadlock: a rung waits only for trials that run, are pending,
  or are not asked yet, and a waiting trial holds neither a slot nor the limiter's count. (``search.reproducible``'s
  ordered asking would wait for earlier trials to *finish*, which under halving they do only after the cell's first
  rung: its lag is therefore the cell's budget, :meth:`trainables.schema.scheduler.halving.HalvingSpec.lag`.)

Like :class:`~study.search.cell_asha.CellASHA` its state (every cell's rungs with every recorded value, its decisions,
each trial's cell and ask order) is written to the study directory's ``scheduler_state.json`` (versioned JSON,
:mod:`study.search.scheduler_state`) whenever it changes and read back the first time a restored driver calls it: Ray restores a scheduler from the pickle taken at the experiment's
start. Ray restores every unfinished trial PENDING: one the state says waits at a rung stays PAUSED until its rung is
decided; one the state says was stopped is stopped at the first step, without training.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from study.runtime.compat import concurrency_limiter, hold_concurrency, keep_paused_on_add, release_concurrency
from study.runtime.shells import PickledAsArguments
from study.search import scheduler_state
from study.search.cell_asha import cell_label_of
from trainables.schema.scheduler.halving import halving_rungs, kept_count

__all__ = ["HalvingScheduler", "HalvingRule", "halving_rungs", "kept_count", "kept_at_rung"]


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _rank_key(value: float | None, mode: str, tie: Any) -> tuple[bool, float, Any]:
    """Smaller is better: a value (``None`` last), then the tie-break."""
    if value is None:
        return (True, 0.0, tie)
    return (False, -value if mode == "max" else value, tie)


def kept_at_rung(
    values: Mapping[str, float | None],
    *,
    mode: str,
    eta: float,
    hedge: int = 0,
    order: Mapping[str, int] | None = None,
) -> set[str]:
    """The trials a rung keeps: the best :func:`kept_count` of ``values`` (trial id → its value at the rung; ``None``,
    NaN or ±inf rank last). Ties go to the smaller ``order[trial id]`` (the cell's ask order), else the smaller id.
    Depends on the mapping's contents only, never on its order."""
    quota = min(kept_count(len(values), eta, hedge), len(values))
    ranked = sorted(values, key=lambda t: (*_rank_key(_finite(values[t]), mode, (order or {}).get(t, 0)), t))
    return set(ranked[:quota])


@dataclass
class _Cell:
    """One cell's rungs: the value each trial reported at each rung, each rung's decision (``None``: undecided)."""

    rungs: list[dict[str, float | None]]
    kept: list[set[str] | None]
    #: Trial id → the order the scheduler was given it (the tie-break).
    members: dict[str, int] = field(default_factory=dict)
    #: Trials that ended without a decision stopping them (error, removal, completion).
    ended: set[str] = field(default_factory=set)
    #: Trials a decision stopped.
    stopped: set[str] = field(default_factory=set)

    @classmethod
    def empty(cls, rungs: int) -> _Cell:
        return cls([{} for _ in range(rungs)], [None] * rungs)

    def last_rung(self, trial_id: str) -> int:
        """The last rung the trial reported at (-1: none yet)."""
        return max((k for k, recorded in enumerate(self.rungs) if trial_id in recorded), default=-1)

    def waiting(self, trial_id: str) -> bool:
        """Reported at a rung that is not decided yet."""
        k = self.last_rung(trial_id)
        return k >= 0 and self.kept[k] is None

    def live(self, trial_id: str) -> bool:
        return trial_id not in self.ended and trial_id not in self.stopped


@dataclass(frozen=True)
class HalvingRule:
    """What every cell's halving shares: ``budget`` trials per cell (``num_trials``: the population rung 0 waits for);
    the search ``metric`` (a validation metric) and its ``mode``; ``max_t``, ``first_rung`` and ``reduction_factor``
    place the rungs (:func:`halving_rungs`), ``hedge`` with η says how many each keeps (:func:`kept_count`)."""

    budget: int
    metric: str
    mode: str
    max_t: int
    first_rung: int
    reduction_factor: float
    hedge: int = 0


class HalvingScheduler(PickledAsArguments, FIFOScheduler):
    """Synchronous successive halving with rungs per cell, persisted in ``state_file`` (the rule: module docstring).

    Args:
        cells: each cell's ``(label, fixed values)``; a trial's cell is its config's
            :data:`~trainables.schema.trial.CELL_KEY` when present, else the cell whose fixed values it holds
            (:func:`~study.search.cell_asha.cell_label_of`). A study is one cell (``[(name, {})]``).
        rule: the population, rungs and cut, the same for every cell (:class:`HalvingRule`).
        state_file: where the rungs are kept across driver restarts (the study's ``scheduler_state.json``).
    """

    #: The ``kind`` its state file and Ray's pickle of it record (:data:`study.runtime.shells.KINDS`).
    KIND = "halving"

    def __init__(self, cells: list[tuple[str, dict[str, Any]]], rule: HalvingRule, state_file: str) -> None:
        super().__init__()
        self.cells = cells
        self.rule = rule
        self.budget = rule.budget
        self._metric, self._mode = rule.metric, rule.mode
        self.rung_epochs = halving_rungs(rule.max_t, rule.first_rung, rule.reduction_factor)
        self.eta, self.hedge = rule.reduction_factor, rule.hedge
        self.per_cell: dict[str, _Cell] = {label: _Cell.empty(len(self.rung_epochs)) for label, _ in cells}
        #: Ray trial id → its cell's label, for every trial this scheduler was given.
        self.trial_cell: dict[str, str] = {}
        self.next_order = 0
        self.state_file = state_file
        self._loaded = False
        self._transient()

    def _transient(self) -> None:
        #: This driver's Ray trials by id (to pause, resume and stop them); never persisted.
        self._trials: dict[str, Any] = {}
        #: Restored trials the state says were stopped: stopped at the next ``choose_trial_to_run``.
        self._stop_restored: list[str] = []

    def arguments(self) -> dict[str, Any]:
        cells = [[label, dict(fixed)] for label, fixed in self.cells]
        return {"cells": cells, "rule": dataclasses.asdict(self.rule), "state_file": self.state_file}

    @classmethod
    def from_arguments(cls, cells: list[list[Any]], rule: dict[str, Any], state_file: str) -> HalvingScheduler:
        return cls([(label, fixed) for label, fixed in cells], HalvingRule(**rule), state_file)

    def __setstate__(self, state: dict[str, Any]) -> None:  # a scheduler pickled whole, by an older driver
        self.__dict__.update(state)
        self._transient()

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return metric in (None, self._metric) and mode in (None, self._mode)

    # ------------------------------------------------------------------------------------------------ persistence

    def _load_once(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        fields = scheduler_state.read_state(self.state_file, self.KIND, scheduler_state.halving_legacy)
        if fields is not None:
            self.per_cell = {label: _Cell(**kw) for label, kw in scheduler_state.halving_cells(fields).items()}
            self.trial_cell, self.next_order = dict(fields["trial_cell"]), int(fields["order"])

    def _persist(self) -> None:
        fields = scheduler_state.halving_fields(self.per_cell, self.trial_cell, self.next_order)
        scheduler_state.write_state(self.state_file, self.KIND, fields)

    def decisions(self) -> dict[str, list[set[str] | None]]:
        """Every cell's decisions: label → per rung, the trials it kept (``None``: undecided)."""
        return {label: [None if k is None else set(k) for k in cell.kept] for label, cell in self.per_cell.items()}

    def rung_values(self) -> dict[str, list[dict[str, float | None]]]:
        """Every cell's rungs: label → per rung, {trial id: the value recorded there}."""
        return {label: [dict(r) for r in cell.rungs] for label, cell in self.per_cell.items()}

    # ------------------------------------------------------------------------------------------------- the rule

    def _decidable(self, cell: _Cell, k: int) -> bool:
        if cell.kept[k] is not None or (k > 0 and cell.kept[k - 1] is None):
            return False
        reached = cell.rungs[k]
        if k == 0:
            below = [t for t in cell.members if t not in reached and cell.live(t)]
            heard = len(reached) + sum(1 for t in cell.ended if t not in reached)
            return not below and heard >= self.budget
        previous = cell.kept[k - 1]
        assert previous is not None
        return not [t for t in previous if t not in reached and cell.live(t)]

    def _decide(self, cell: _Cell, k: int) -> None:
        values = {t: v for t, v in cell.rungs[k].items() if t not in cell.ended}
        kept = kept_at_rung(values, mode=self._mode, eta=self.eta, hedge=self.hedge, order=cell.members)
        cell.kept[k] = kept
        cell.stopped |= set(values) - kept

    def _late_kept(self, cell: _Cell, k: int, trial_id: str) -> bool:
        """A trial reaching rung ``k`` after its decision: kept if it ranks above the worst trial the rung kept."""
        kept = cell.kept[k]
        assert kept is not None

        def key(t: str) -> tuple[Any, ...]:
            return (*_rank_key(_finite(cell.rungs[k][t]), self._mode, cell.members.get(t, 0)), t)

        return bool(kept) and key(trial_id) < max(key(t) for t in kept)

    def _settle(self, tune_controller: Any) -> None:
        """Decide every rung that can be, write the state, then count the kept again (they resume) and stop the rest,
        except ``_current``, the trial whose result is being handled (its decision is the return value)."""
        to_stop: list[str] = []
        limiter = concurrency_limiter(tune_controller)
        for cell in self.per_cell.values():
            for k in range(len(self.rung_epochs)):
                if not self._decidable(cell, k):
                    continue
                before = set(cell.stopped)
                self._decide(cell, k)
                for t in cell.kept[k] or ():
                    if limiter is not None and t != self._current:
                        hold_concurrency(limiter, t)
                to_stop += sorted(t for t in cell.stopped - before if t != self._current)
        self._persist()
        for trial_id in to_stop:
            trial = self._trials.get(trial_id)
            if trial is None or trial.status in (Trial.TERMINATED, Trial.ERROR):
                continue
            if limiter is not None:
                hold_concurrency(limiter, trial_id)  # the limiter tells the searcher of a trial it counts only
            tune_controller.stop_trial(trial)

    # --------------------------------------------------------------------------------------- Ray's scheduler calls

    _current: str | None = None

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._load_once()
        self._trials[trial.trial_id] = trial
        label = self.trial_cell.get(trial.trial_id)
        if label is not None:  # restored by Tuner.restore: Ray set it PENDING
            self._restored(tune_controller, trial, self.per_cell[label])
            return
        label = cell_label_of(self.cells, trial.config)
        if label is None:  # not a cell's trial: it runs to the end
            return
        self.trial_cell[trial.trial_id] = label
        self.per_cell[label].members[trial.trial_id] = self.next_order
        self.next_order += 1
        self._persist()

    def _restored(self, tune_controller: Any, trial: Any, cell: _Cell) -> None:
        trial_id, limiter = trial.trial_id, concurrency_limiter(tune_controller)
        if trial.status in (Trial.TERMINATED, Trial.ERROR):  # Ray restores ended trials too, to run no more
            return
        if trial_id in cell.ended:  # ended after Ray's last snapshot, which restores it to run again: it is live
            cell.ended.discard(trial_id)
            self._persist()
        if trial_id in cell.stopped:
            keep_paused_on_add(trial)
            self._stop_restored.append(trial_id)
        elif cell.waiting(trial_id):
            keep_paused_on_add(trial)
            if limiter is not None:
                release_concurrency(limiter, trial_id)
        elif limiter is not None:
            hold_concurrency(limiter, trial_id)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        self._load_once()
        label = self.trial_cell.get(trial.trial_id)
        if label is None:
            return TrialScheduler.CONTINUE
        cell, trial_id = self.per_cell[label], trial.trial_id
        if trial_id in cell.stopped:
            return TrialScheduler.STOP
        last = cell.last_rung(trial_id)
        if last >= 0 and cell.kept[last] is None:  # still waits (a restored trial run on): it pauses again
            return self._pause(tune_controller, trial_id)
        k = last + 1
        epoch = result.get("training_iteration", 0)
        if k >= len(self.rung_epochs) or epoch < self.rung_epochs[k]:
            return TrialScheduler.CONTINUE
        cell.rungs[k][trial_id] = _finite(result.get(self._metric))
        if cell.kept[k] is not None:  # a late arrival (a replacement of a trial lost before rung 0)
            if self._late_kept(cell, k, trial_id):
                cell.kept[k].add(trial_id)  # type: ignore[union-attr]  # checked just above
            else:
                cell.stopped.add(trial_id)
        else:
            self._current = trial_id
            try:
                self._settle(tune_controller)
            finally:
                self._current = None
        self._persist()
        if trial_id in cell.stopped:
            return TrialScheduler.STOP
        if cell.kept[k] is None:
            return self._pause(tune_controller, trial_id)
        return TrialScheduler.CONTINUE

    def _pause(self, tune_controller: Any, trial_id: str) -> str:
        if (limiter := concurrency_limiter(tune_controller)) is not None:
            release_concurrency(limiter, trial_id)
        return TrialScheduler.PAUSE

    def _ended(self, tune_controller: Any, trial: Any) -> None:
        """A trial ended without a decision stopping it: it leaves its cell's population, which may decide a rung."""
        self._load_once()
        label = self.trial_cell.get(trial.trial_id)
        if label is None:
            return
        cell = self.per_cell[label]
        if trial.trial_id in cell.stopped or trial.trial_id in cell.ended:
            return  # our own stop (Ray calls back from stop_trial), or told already
        cell.ended.add(trial.trial_id)
        self._settle(tune_controller)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._ended(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._ended(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._ended(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any | None:
        """A promoted PAUSED trial first, while fewer than ``max_concurrent`` trials run or wait to start; else a
        PENDING one. A PAUSED trial still waiting at its rung is never returned."""
        self._load_once()
        limiter = concurrency_limiter(tune_controller)
        for trial_id in self._stop_restored:
            trial = self._trials[trial_id]
            if trial.status == Trial.PAUSED:
                if limiter is not None:
                    hold_concurrency(limiter, trial_id)
                tune_controller.stop_trial(trial)
        self._stop_restored = []
        trials = tune_controller.get_trials()
        active = sum(1 for t in trials if t.status in (Trial.RUNNING, Trial.PENDING))
        if limiter is None or active < limiter.max_concurrent:
            for trial in trials:
                if trial.status == Trial.PAUSED and self._may_resume(trial.trial_id):
                    return trial
        return next((t for t in trials if t.status == Trial.PENDING), None)

    def _may_resume(self, trial_id: str) -> bool:
        label = self.trial_cell.get(trial_id)
        if label is None:
            return True
        cell = self.per_cell[label]
        return cell.live(trial_id) and not cell.waiting(trial_id)

    def debug_string(self) -> str:
        parts = []
        for label, cell in self.per_cell.items():
            sizes = "/".join(str(len(r)) if k is None else f"{len(r)}→{len(k)}" for r, k in zip(cell.rungs, cell.kept))
            parts.append(f"{label}: {sizes}")
        return f"Halving (rungs at epochs {self.rung_epochs}): " + "; ".join(parts)

"""The searcher of a run's one Ray Tune experiment: a small dispatcher over one
:class:`~study.search.study_search.StudySearch` (Optuna behind Ray) per cell of its plan (:mod:`study.intake.plan`: a table's
arm × condition cells, a study's one cell). It stamps each trial's cell into its config
(:data:`~trainables.schema.trial.CELL_KEY`) when it asks for it, so nothing downstream matches configs to find it.

Why one experiment with a dispatching searcher, not one Tuner per cell: every cell's trials then share the cluster
under the table's ``max_concurrent`` (a Tuner per cell would run cells one after another, or need threads around
``Tuner.fit``, which Ray does not support in one driver); the table resumes as one experiment
(``Tuner.restore``: Ray pickles this searcher with its per-cell searchers at each snapshot, and each cell's
Optuna study adopts or fails the trials asked after the last snapshot exactly as a study does); and the final stage,
the MLflow callback and the progress table are the study's own. Each cell keeps its own Optuna study (its own TPE
history, readable name in optuna-dashboard), and its own budget: a new Ray trial goes to the cell with the fewest
trials asked so far (ties: table order) that may ask now, so the cells advance together and each sampler sees its
earlier trials. With ``search.reproducible`` each cell's sampler is ordered (:mod:`study.search.ordered_sampler`, lag
:attr:`~study.intake.plan.StudyPlan.lag`): what a cell samples depends on its own trials' outcomes, never on timing.

A cell's budget counts *evaluated* trials. A trial Ray reports as errored for a reason outside its configuration (its
node was lost, its actor died, ``--max-failures`` restarts ran out) is replaced: its Optuna trial stays FAIL and the
cell asks one more, so every cell ends with ``num_trials`` finished (COMPLETE or PRUNED) trials. A trial whose loss
was not finite failed because of its configuration (the same batches give the same NaN again): the loop leaves
:data:`~trainables.schema.record.NONFINITE_MARKER` in the trial's folder before it fails, and such a trial counts as
evaluated, FAIL in Optuna, not replaced. Replacements are bounded, ``num_trials`` per cell (a cell whose every trial
errors ends after twice its budget instead of looping), so a cell may still end short: the report's ``failed``
column says so.

**A lost trial is told FAIL only once Ray's saved state says Ray will not run it again.** Optuna's storage is written
at once, Ray's experiment snapshot a second or more later: a driver that ends between the two (its node declared dead
after missed heartbeats fails the running trials, then the driver stops) left Optuna FAIL for a trial that
``--resume`` restored from its checkpoint and finished, FINISHED in MLflow and in the cell's selection, failed in the
report. So a lost trial is held (:attr:`CellSearch.lost`: ended for the cell's budget, its Optuna trial RUNNING) and
settled (:meth:`CellSearch.settle_lost`) when the search ends whole, after Ray's last snapshot (:class:`ReconcileTrials`,
``on_experiment_end``), or on a restore against the trials Ray restored: one it runs again goes back to its cell and
ends as any trial does; one it does not is told FAIL. The same restore reconciles a searcher snapshot older than Ray's
trial list (a trial Ray holds as ended that the searcher still waits for). With ``search.reproducible`` the ordered
sampler does not wait for a held trial (:meth:`StudySearch.hold_lost`); what it samples depends on timing only where a
trial was lost, as it did before.

**A cell's final seeds start as soon as its search ends** (a table, ``final``). The final stage used to wait
for the last cell's search, so slots idled at the end of every table while the longest cell searched. With ``final``
the searcher asks the final points itself, in the same experiment: once every trial of a cell (each replicate is a
cell) has ended, it picks the cell's best by the final stage's rule (:func:`study.final.best.best_full_trial`: the last
value, full trials first, ties to the earliest Optuna number) from the results it was told, and queues the cell's
:func:`~study.final.stage.seed_points`; the next free slots take them before any search trial (the longest jobs first,
so the run does not end on one). The driver reads them back by their points (:func:`study.final.stage.point_key`), and
retrains after the search only what the search did not (a run resumed from before, a cell with no finite score).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from ray.tune.search import Searcher

from study.final.best import best_full_trial
from study.final.stage import point_key, seed_points
from study.runtime.compat import (
    completed_trials_of,
    optuna_trials_of,
)
from study.runtime.storage import read_bytes
from study.search.reconcile import _ENDED, _RUNS_AGAIN, _TERMINATED, ReconcileTrials
from study.search.study_search import StudySearch
from study.search.trial_attrs import decoded_selection, record_trial_attrs, restored_last_result
from study.tracking.outage import through_ray
from trainables.schema import record as R
from trainables.schema.metric_names import COST_METRICS, EPOCH
from trainables.schema.spec import FinalSpec
from trainables.schema.trial import CELL_KEY, FINAL_KEY

__all__ = ["CellSearch", "CellBudget", "AdoptRestoredFinals"]


@dataclass(frozen=True)
class CellBudget:
    """Each cell's budget of evaluated trials, and whether a lost trial is replaced (a table: every cell keeps its
    budget; a study: no, its contract is ``num_trials`` trials, the failed ones included). ``final``: the final
    stage's seeds, started per cell as its search ends (a table); ``None``: the final stage runs after the search."""

    trials: int
    replace_lost: bool = True
    final: FinalSpec | None = None
    #: A full trial's epochs (the best rule prefers trials that trained them all).
    epochs: int = 0
    #: The epochs at which the scheduler ranks trials before the last (halving's rungs): a trial's per-class record
    #: there is kept, so a cell whose choice a rung made reports its reliability (study.final.reliability).
    rungs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class _Outcome:
    """What the best rule reads of a search trial that ended without error: its last value, epochs and Optuna number."""

    trial_id: str
    value: object
    epochs: int
    number: float


class CellSearch(Searcher):
    """Dispatches Ray trials to per-cell searchers, ``budget`` evaluated trials each (a study: one cell).

    Lifecycle (Ray's ``Searcher`` protocol): ``suggest(trial_id)`` picks the cell, asks its searcher and returns the
    cell's fixed values (family, condition, the arm's params) with the sampled ones; ``on_trial_result`` and
    ``on_trial_complete`` go to the searcher that suggested the trial (an errored trial is first judged: replaced or
    evaluated, see the module docstring); ``save``/``restore`` pickle the whole dispatcher (Ray calls them at each
    experiment snapshot and on ``Tuner.restore``).

    ``trials_dir``: the folder of the search experiment's trial folders (``<study dir>/tune``), where a trial whose
    loss was not finite leaves its marker; ``None`` (tests without Ray) treats every errored trial as lost.
    ``budget``: each cell's trials, and whether a lost one is replaced (:class:`CellBudget`; an int: replaced).
    """

    def __init__(
        self,
        cells: list[tuple[str, dict[str, Any], StudySearch]],
        budget: int | CellBudget,
        metric: str,
        mode: str,
        trials_dir: str | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        budget = budget if isinstance(budget, CellBudget) else CellBudget(budget)
        self.cells = cells
        self.budget = budget.trials
        self.trials_dir = trials_dir
        self.replace_lost = budget.replace_lost
        #: Trials given to each cell, replaced ones included.
        self.asked = [0] * len(cells)
        #: Errored trials of each cell given back to its budget (at most ``budget``).
        self.replaced = [0] * len(cells)
        self.trial_cell: dict[str, int] = {}
        #: Trials that ended (completed or errored): the others may still error and be replaced.
        self.ended: set[str] = set()
        #: Each running trial's cost in its last result (:data:`~trainables.schema.metric_names.COST_METRICS`).
        self.last_cost: dict[str, dict[str, float]] = {}
        self.final = budget.final
        self.epochs = budget.epochs
        self.rungs = budget.rungs
        #: Each search trial's fixed and sampled values (a winner's are its final points' params).
        self.sampled: dict[str, dict[str, Any]] = {}
        #: Each running search trial's last value and epoch; each ended one's outcome (the best rule's input).
        self.last_value: dict[str, dict[str, Any]] = {}
        self.outcomes: dict[str, _Outcome] = {}
        #: Final points due (cells whose search ended), the cells that queued theirs, the final trials asked.
        self.final_due: list[dict[str, Any]] = []
        self.final_cells: set[int] = set()
        self.final_trials: dict[str, dict[str, Any]] = {}
        #: Lost trials whose Optuna trial is not told yet (module docstring): trial id → whether it was given back to
        #: its cell's budget.
        self.lost: dict[str, bool] = {}

    @property
    def max_trials(self) -> int:
        """The most Ray trials the run may take: every cell's budget and every cell's replacements, and its final
        seeds when the search asks them."""
        finals = 0 if self.final is None else self.final.seeds * len(self.cells)
        return (2 if self.replace_lost else 1) * self.budget * len(self.cells) + finals

    def counted(self, index: int) -> int:
        """Trials of cell ``index`` that count against its budget: asked, less those replaced."""
        return self.asked[index] - self.replaced[index]

    @through_ray  # a store outage past its budget ends the driver, not the trial
    def suggest(self, trial_id: str) -> dict | None:
        index = self.trial_cell.get(trial_id)
        if index is not None:  # Ray asks again for a trial it was given (not in Ray 2.60's loop; kept safe)
            return self._config(index, self.cells[index][2].suggest(trial_id))
        if trial_id in self.final_trials:
            return {FINAL_KEY: self.final_trials[trial_id]}
        asked = {point_key(p) for p in self.final_trials.values()}
        while self.final_due:  # a cell's final seeds before any search trial: the longest jobs first
            point = self.final_due.pop(0)
            if point_key(point) not in asked:  # (a restored trial runs it already: adopt_restored)
                self.final_trials[trial_id] = point
                return {FINAL_KEY: point}
        open_cells = sorted((self.counted(i), i) for i in range(len(self.cells)) if self.counted(i) < self.budget)
        if not open_cells:
            # A trial still running may yet error and be replaced: finish once every trial has ended.
            in_flight = any(t not in self.ended for t in self.trial_cell)
            return None if in_flight else Searcher.FINISHED  # type: ignore[return-value]  # Ray's "no more trials"
        for _, index in open_cells:
            # A cell's searcher returns None while its next trial must wait for an earlier one of the cell
            # (``search.reproducible``): the slot goes to the next cell, so a wait costs no idle slot while another
            # cell may ask. Which cell takes a slot depends on timing; what each cell samples does not.
            sampled = self.cells[index][2].suggest(trial_id)
            if sampled is not None:
                self.asked[index] += 1
                self.trial_cell[trial_id] = index
                return self._remember(trial_id, self._config(index, sampled))
        return None  # every open cell waits: Ray asks again on its next step

    def _config(self, index: int, sampled: dict | None) -> dict | None:
        """The trial's config: the cell's fixed values, the sampled ones, which never touch a fixed value (the
        table's spec allows an arm to search its own knobs only, :mod:`trainables.schema.table`), and the cell's
        label under :data:`~trainables.schema.trial.CELL_KEY`."""
        if not isinstance(sampled, dict):
            return sampled
        fixed = self.cells[index][1]
        clash = sorted(k for k in sampled for f in fixed if k == f or k.startswith(f + ".") or f.startswith(k + "."))
        if clash:
            raise RuntimeError(
                f"cell {self.cells[index][0]}: the sampled {clash[0]!r} would override the cell's fixed values "
                f"{sorted(fixed)}; a table's arm may not search them (trainables.schema.table)"
            )
        return {**fixed, **sampled, CELL_KEY: self.cells[index][0]}

    def _remember(self, trial_id: str, config: dict | None) -> dict | None:
        """Keep a search trial's values (its cell's final points are its if it wins)."""
        if isinstance(config, dict):
            self.sampled[trial_id] = {k: v for k, v in config.items() if k != CELL_KEY}
        return config

    def _searcher(self, trial_id: str) -> StudySearch | None:
        index = self.trial_cell.get(trial_id)
        return None if index is None else self.cells[index][2]

    @through_ray  # a store outage past its budget ends the driver, not the trial
    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if (searcher := self._searcher(trial_id)) is not None:
            # A scheduler may stop a trial that waits, paused, at a rung (study.search.halving): Ray then completes it
            # with no result, so its cost so far is kept from its last one.
            costs = {k: float(v) for k in COST_METRICS if isinstance(v := result.get(k), (int, float))}
            self.__dict__.setdefault("last_cost", {})[trial_id] = costs  # (a dispatcher pickled before it had one)
            self._keep_selection(trial_id, result)
            self.last_value[trial_id] = {k: result[k] for k in (self.metric, EPOCH) if k in result}
            searcher.on_trial_result(trial_id, result)

    @through_ray  # a store outage past its budget ends the driver, not the trial
    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        index = self.trial_cell.get(trial_id)
        if index is None:
            return
        searcher = self.cells[index][2]
        held = False
        if error and trial_id not in self.ended:
            if self._nonfinite(trial_id):  # evaluated: say so on the Optuna trial before it is told FAIL
                trial = optuna_trials_of(searcher).get(trial_id)
                if trial is not None and trial_id not in completed_trials_of(searcher):
                    trial.set_user_attr(R.OPTUNA_FAILURE, R.FAILURE_NONFINITE)
            else:  # lost, not evaluated: the cell asks another, and Optuna waits for Ray's snapshot (docstring)
                given_back = self.replace_lost and self.replaced[index] < self.budget
                self.replaced[index] += given_back
                held = True
                self.__dict__.setdefault("lost", {})[trial_id] = given_back
                searcher.hold_lost(trial_id)
        self.ended.add(trial_id)
        if result and result.get(EPOCH) != self.last_value.get(trial_id, {}).get(EPOCH):
            # A result Ray hands to on_trial_complete only (a scheduler stopped the trial on it, at a rung): what the
            # selection reads of it is kept too, or the trial's record would be its epoch before.
            self._keep_selection(trial_id, result)
        last = self.__dict__.setdefault("last_cost", {}).pop(trial_id, {})
        record_trial_attrs(searcher, trial_id, {**last, **(result or {}), **self._selection_attrs(trial_id)})
        final = {**self.last_value.pop(trial_id, {}), **(result or {})}
        if not error and final:
            trial = optuna_trials_of(searcher).get(trial_id)
            number = float(trial.number) if trial is not None else float("inf")
            self.outcomes[trial_id] = _Outcome(trial_id, final.get(self.metric), int(final.get(EPOCH, 0)), number)
        if not held:
            searcher.on_trial_complete(trial_id, result=result, error=error)
        self._start_final(index)

    def settle_lost(self, runs_again: set[str]) -> list[str]:
        """Settle the held lost trials (:attr:`lost`) once Ray's saved state is known: each that Ray runs again
        (``runs_again``) goes back to its cell (no longer ended, no longer replaced), each other one is told FAIL.
        Returns the ids told FAIL."""
        told = []
        for trial_id, given_back in sorted(self.__dict__.setdefault("lost", {}).items()):
            index = self.trial_cell[trial_id]
            if trial_id in runs_again:
                self.ended.discard(trial_id)
                self.replaced[index] -= given_back
                self.cells[index][2].release_lost(trial_id)
            else:
                self.cells[index][2].on_trial_complete(trial_id, result=None, error=True)
                told.append(trial_id)
        self.lost.clear()
        return told

    def reconcile(self, ray_trials: list[tuple[str, str, dict[str, Any] | None]]) -> list[str]:
        """After a restore, before any trial is asked: make this searcher agree with the trials Ray restored
        (``(trial id, status, last result)``; Ray's ``Trial.status`` names). A held lost trial Ray runs again goes
        back to its cell, one it does not is told FAIL; a search trial Ray holds as ended that this searcher still
        waits for (its snapshot is older than Ray's trial list) is told as it ended. Returns the ids told FAIL."""
        runs_again = {tid for tid, status, _ in ray_trials if status in _RUNS_AGAIN}
        for trial_id, status, last in ray_trials:
            if trial_id in self.trial_cell and trial_id not in self.ended and status in _ENDED:
                ended = status == _TERMINATED
                searcher = self.cells[self.trial_cell[trial_id]][2]
                result = restored_last_result(searcher, trial_id, self.metric, last) if ended else None
                self.on_trial_complete(trial_id, result, error=not ended)
        return self.settle_lost(runs_again)

    def _start_final(self, index: int) -> None:
        """Once every trial of cell ``index`` has ended and its budget is spent, queue its final points: its best
        trial's values (:func:`~study.final.best.best_full_trial`, the final stage's rule) with each final seed."""
        if self.final is None or index in self.final_cells or self.counted(index) < self.budget:
            return
        members = [t for t, i in self.trial_cell.items() if i == index]
        if any(t not in self.ended for t in members):
            return
        self.final_cells.add(index)
        best = best_full_trial(
            [self.outcomes[t] for t in members if t in self.outcomes and t in self.sampled],
            lambda o: o.value,
            lambda o: o.epochs >= self.epochs,
            lambda o: (o.number, o.trial_id),
            self.mode or "max",
        )
        if best is not None:  # else no finite score: the driver finds no winner either
            self.final_due.extend(
                seed_points(self.final, self.cells[index][0], self.sampled[best.trial_id], best.trial_id)
            )

    def _keep_selection(self, trial_id: str, result: dict) -> None:
        """What the cell's selection reliability reads of a trial (:mod:`study.final.reliability`): its last result's
        search metric per validation class, and its search metric at its last two epochs (the one before is the
        last value kept so far). In the dispatcher's own dict, so a dispatcher pickled before it had them reads."""
        kept = self.__dict__.setdefault("selection", {}).setdefault(trial_id, {})
        if isinstance(record := result.get(R.VAL_PER_CLASS), str):
            kept[R.VAL_PER_CLASS] = record
            if (epoch := result.get(EPOCH)) in self.__dict__.get("rungs", ()):
                kept.setdefault(R.OPTUNA_RUNG_RECORDS, {})[str(epoch)] = record
        if isinstance(value := result.get(self.metric), (int, float)):
            before = self.last_value.get(trial_id, {}).get(self.metric)
            kept[R.OPTUNA_LAST_TWO] = [float(before) if isinstance(before, (int, float)) else None, float(value)]

    def _selection_attrs(self, trial_id: str) -> dict[str, Any]:
        """:meth:`_keep_selection`'s values of an ending trial, as its Optuna trial's user attributes (JSON)."""
        return decoded_selection(self.__dict__.setdefault("selection", {}).pop(trial_id, {}))

    def _nonfinite(self, trial_id: str) -> bool:
        """Whether the trial failed on a loss that was not finite (its configuration's failure, evaluated)."""
        if self.trials_dir is None:
            return False
        try:
            return read_bytes(f"{self.trials_dir}/{R.trial_dir(trial_id)}/{R.NONFINITE_MARKER}") is not None
        except OSError:  # the storage did not answer: count it as lost (replacements are bounded)
            return False

    def adopt_restored(self, trials: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """After a restore, take the final trials Ray restored that this searcher's snapshot does not know as asked,
        so their points are not asked again; returns their ids. ``trials``: Ray's restored (trial id, config).

        Ray writes the experiment's state and this searcher's pickle together, but copies them to the storage in the
        background, one file after another: a driver killed during the copy leaves a trial list newer than the
        searcher (measured: a replicated study killed as a final seed started ran that seed twice after --resume)."""
        adopted = []
        for trial_id, config in trials:
            if FINAL_KEY in config and trial_id not in self.final_trials and trial_id not in self.trial_cell:
                self.final_trials[trial_id] = config[FINAL_KEY]
                adopted.append(trial_id)
        return adopted

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)  # noqa: S301 - Ray's own snapshot of this searcher
        # A snapshot taken before replacements existed: nothing was replaced, and no trial it knew of is waited for.
        # One taken before studies were one-cell plans was a table's: it replaced lost trials.
        old: dict[str, object] = {
            "replaced": [0] * len(state["cells"]),
            "ended": set(state["trial_cell"]),
            "trials_dir": None,
            "replace_lost": True,
            "last_cost": {},
            # One taken before a table's final seeds were asked here: the final stage runs after the search.
            "final": None,
            "epochs": 0,
            "sampled": {},
            "last_value": {},
            "outcomes": {},
            "final_due": [],
            "final_cells": set(),
            "final_trials": {},
            "lost": {},
            "rungs": frozenset(),
        }
        self.__dict__.update({**old, **state})
        for _, _, searcher in self.cells:
            searcher.adopt_orphans()


#: The class's name before the searcher dispatched over cells (a table's pickles name it so: study.search.old_names).
TableSearch = CellSearch


class AdoptRestoredFinals(ReconcileTrials):
    """The restore's :class:`~study.search.reconcile.ReconcileTrials` under its former name (a restored study's pickled
    run config may hold one: it adopted the final trials Ray restored; it now also reconciles the trials' ends)."""

    def __init__(self, searcher: CellSearch) -> None:
        super().__init__(searcher, restored=True)

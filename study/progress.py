"""The live view of a run's search, printed by the driver: one row per trial (a study: :class:`ProgressTable`) or one
row per cell (a table: :class:`CellProgress`), as the run's plan says (:mod:`study.intake.plan`).

Ray's own reporter prints the full trial config (our whole spec); these show what a researcher scans for. Per trial:
its status, epoch, sampled hyperparameters and objective, and the best trial so far. Per cell: trials finished /
budget, stopped early (by the scheduler; they count as finished), running, failed (a lost trial is replaced:
study/search/cell_search.py), best validation score; in the header the trials finished and, once trials have finished
in this driver, the estimated time left (search and final stage).

The estimate is the rate at which this driver's trials have reported epochs, in model-epochs on all training classes
(:meth:`study.intake.plan.StudyPlan.search_cost`: k folds train k−1 such models' worth), applied to what is left: the search
epochs not yet trained and every final run's. A resumed driver measures its own rate (a trial restored from its
checkpoint does not count the epochs it already had). It is printed, never acted on.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ray.tune import Callback

from study.console import format_table, format_value
from study.final.best import best_full_trial
from study.final.reliability import Candidate, choice
from study.intake.plan import StudyPlan
from study.runtime.shells import PickledAsDiscarded
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH
from trainables.schema.trial import CELL_KEY, FINAL_KEY, STAGE_KEYS

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = ["ProgressTable", "TrialColumns", "CellProgress", "ThrottledTable", "format_table", "eta_text"]


class ThrottledTable(PickledAsDiscarded, Callback):
    """A live table printed at most every ``interval_s`` seconds and whenever a trial ends; subclasses say what it
    holds (:meth:`render`)."""

    def __init__(self, interval_s: float = 15.0, stream: TextIO | None = None) -> None:
        self.interval_s = interval_s
        self.stream = stream
        self._last = 0.0
        #: The epochs at which a pausing scheduler ranks trials before the last (halving's rungs), and each trial's
        #: per-class validation record there: a choice a rung made gets its reliability (:func:`selection_line`).
        self.rungs: frozenset[int] = frozenset()
        self.rung_records: dict[str, dict[int, str]] = {}

    def render(self, trials: list[Trial]) -> str:
        raise NotImplementedError

    def _print(self, trials: list[Trial], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        print(self.render(trials), file=self.stream or sys.stdout, flush=True)

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        if result.get(EPOCH) in self.__dict__.get("rungs", ()) and isinstance(
            record := result.get(R.VAL_PER_CLASS), str
        ):
            self.__dict__.setdefault("rung_records", {}).setdefault(trial.trial_id, {})[int(result[EPOCH])] = record
        self._print(trials)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._print(trials, force=True)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._print(trials, force=True)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self._print(trials, force=True)


@dataclass(frozen=True)
class TrialColumns:
    """What a row per trial shows: the ``metric`` (best by ``mode``), the epoch of ``total_epochs``, the sampled
    ``param_names``; the header counts trials done of ``total_trials``."""

    metric: str
    mode: str
    total_trials: int
    total_epochs: int
    param_names: tuple[str, ...] = ()


class ProgressTable(ThrottledTable):
    """Each trial's status, epoch, sampled parameters and metric, with the best so far."""

    def __init__(self, columns: TrialColumns, interval_s: float = 15.0, stream: TextIO | None = None) -> None:
        self.metric = columns.metric
        self.mode = columns.mode
        self.total_trials = columns.total_trials
        self.total_epochs = columns.total_epochs
        self.param_names = list(columns.param_names)
        super().__init__(interval_s, stream)

    def render(self, trials: list[Trial]) -> str:
        rows = []
        for t in trials:
            result = t.last_result or {}
            rows.append(
                {
                    "trial": t.trial_id,
                    "status": t.status,
                    "epoch": f"{result.get(EPOCH, 0)}/{self.total_epochs}",
                    **{p: t.config.get(p, "-") for p in self.param_names},
                    self.metric: result.get(self.metric, ""),
                }
            )
        done = sum(t.status in ("TERMINATED", "ERROR") for t in trials)
        header = f"== trials {done}/{self.total_trials} done"
        if (best := self._best(trials, rows)) is not None:
            header += f"; best {best['trial']} {self.metric}={format_value(best[self.metric])}"
        table = format_table(rows, ["trial", "status", "epoch", *self.param_names, self.metric])
        line = None
        if done >= self.total_trials:
            search = [t for t in trials if not _staged(t)]  # a later stage's trials choose nothing
            label = next((str(t.config[CELL_KEY]) for t in search if CELL_KEY in t.config), "this study")
            line = selection_line(label, search, (self.metric, self.mode), self.total_epochs, self.rung_records)
        return f"{header}\n{table}" + ("" if line is None else f"\n{line}")

    def _best(self, trials: list[Trial], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The best trial so far by the final stage's rule (among trials that trained every epoch where any did:
        study.final.best); ``None`` for the final stage's seeds, whose test metric must not look like a choice."""
        if any(FINAL_KEY in t.config for t in trials):
            return None
        full = {t.trial_id for t in trials if int((t.last_result or {}).get(EPOCH, 0)) >= self.total_epochs}
        return best_full_trial(
            rows, lambda r: r[self.metric], lambda r: r["trial"] in full, lambda r: r["trial"], self.mode
        )


def _staged(trial: Trial) -> bool:
    """A trial of a stage after the search (its point's key in its config), not a search trial."""
    return any(key in trial.config for key in STAGE_KEYS)


def eta_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class CellProgress(ThrottledTable):
    """Per cell: trials finished of the budget, running, failed and the best validation score; the ETA in the header."""

    def __init__(self, plan: StudyPlan, interval_s: float = 15.0, stream: TextIO | None = None) -> None:
        super().__init__(interval_s, stream)
        self.plan = plan
        epochs = plan.base.train.epochs
        self.rungs = plan.base.search.scheduler.checkpoint_epochs(epochs) - {epochs}
        self._started: float | None = None
        self._epochs_here = 0

    def _eta(self, search: list[Trial], finals_done: int) -> str:
        if self._started is None or self._epochs_here == 0:
            return ""
        t, epochs = self.plan, self.plan.base.train.epochs
        trained = sum(min(int((x.last_result or {}).get(EPOCH, 0)), epochs) for x in search)
        per_epoch = (time.monotonic() - self._started) / (self._epochs_here * t.search_cost())
        # Under early stopping the search is expected to train its share of every trial's epochs (study.intake.asha_cost, the plan's search_share).
        search_left = max(0.0, t.search_trials * epochs * t.search_share - trained)
        # The later stages follow the search; a table's final seeds may already run in this experiment.
        runs = [(tag, n - (finals_done if tag == R.STAGE_FINAL else 0), searches) for tag, n, searches in t.later_runs]
        models = sum(n * (t.search_cost() if searches else 1.0) for _, n, searches in runs)
        left = (search_left * t.search_cost() + models * epochs) * per_epoch
        then = ", ".join(f"{n} {tag} runs" for tag, n, _ in runs)
        return f"; ETA ≈ {eta_text(left)}" + (f" (then {then})" if then else "")

    def render(self, trials: list[Trial]) -> str:
        plan = self.plan
        metric, mode, epochs = plan.base.search.objective, plan.base.search.mode, plan.base.train.epochs
        per_cell: dict[str, list[Trial]] = {c.label: [] for c in plan.cells}
        # A cell's final seeds, when they start as its search ends (study.search.cell_search): in this experiment.
        finals: dict[str, list[Trial]] = {c.label: [] for c in plan.cells}
        for trial in trials:
            if FINAL_KEY in trial.config:
                finals.setdefault(str(trial.config[FINAL_KEY][R.GROUP]), []).append(trial)
            elif (cell := plan.cell_of(trial.config)) is not None:
                per_cell[cell.label].append(trial)
        rows = []
        lines = []
        for label, members in per_cell.items():
            scored = [(t, (t.last_result or {}).get(metric)) for t in members if t.status == "TERMINATED"]
            # The final stage's rule: among trials that trained every epoch where any did (study.final.best).
            best = best_full_trial(
                scored,
                lambda x: x[1],
                lambda x: int((x[0].last_result or {}).get(EPOCH, 0)) >= epochs,
                lambda x: x[0].trial_id,
                mode,
            )
            ended = sum(t.status in ("TERMINATED", "ERROR") for t in members) >= plan.trials_per_cell
            line = selection_line(label, members, (metric, mode), epochs, self.rung_records) if ended else None
            if line is not None:
                lines.append(line)
            rows.append(
                {
                    "cell": label,
                    "finished": f"{sum(t.status == 'TERMINATED' for t in members)}/{plan.trials_per_cell}",
                    "stopped early": sum(
                        t.status == "TERMINATED" and int((t.last_result or {}).get(EPOCH, 0)) < epochs for t in members
                    ),
                    "running": sum(t.status == "RUNNING" for t in members),
                    "failed": sum(t.status == "ERROR" for t in members),
                    f"best {metric}": "" if best is None else best[1],
                    "final": f"{sum(t.status == 'TERMINATED' for t in finals[label])}/{plan.base.final.seeds}",
                }
            )
        search = [t for m in per_cell.values() for t in m]
        done = sum(t.status == "TERMINATED" for t in search)
        finals_done = sum(t.status == "TERMINATED" for m in finals.values() for t in m)
        header = f"== {plan.title}: search trials {done}/{plan.search_trials} finished{self._eta(search, finals_done)}"
        columns = ["cell", "finished", "stopped early", "running", "failed", f"best {metric}"]
        if plan.final_with_search:
            header += f"; final runs {finals_done}/{plan.final_runs}"
            columns.append("final")
        return "\n".join([header, format_table(rows, columns), *lines])

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        if self._started is None:
            self._started = time.monotonic()

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        self._epochs_here += 1
        super().on_trial_result(iteration, trials, trial, result, **info)


def selection_line(
    label: str,
    trials: list[Trial],
    search: tuple[str, str],
    epochs: int,
    rung_records: dict[str, dict[int, str]] | None = None,
) -> str | None:
    """The cell's selection line (:meth:`study.final.reliability.Reliability.line`, the one ``--status`` and the
    report print), once its search has ended: its ended trials as :class:`~study.final.reliability.Candidate`
    objects in creation order, each with the per-class validation results of its last epoch and its search metric at
    the epochs Ray keeps (the last 10: the rank stability's two). ``search``: the search metric and mode;
    ``rung_records``: per trial its per-class records at the rungs (:class:`ThrottledTable`). ``None`` when there was
    no choice or it cannot be said (:func:`study.final.reliability.choice`)."""
    metric, mode = search
    rungs = rung_records or {}
    candidates = [c for i, t in enumerate(trials) if (c := _candidate(i, t, metric, rungs)) is not None]
    found = choice(candidates, mode, epochs)
    return None if found is None else found.line(label)


def _candidate(number: int, trial: Trial, metric: str, rungs: dict[str, dict[int, str]]) -> Candidate | None:
    """An ended trial as a :class:`~study.final.reliability.Candidate` (``None``: it failed, runs or has no value)."""
    result = trial.last_result or {}
    value = result.get(metric)
    if trial.status != "TERMINATED" or not isinstance(value, (int, float)):
        return None
    epoch = int(result.get(EPOCH, 0))
    kept = (getattr(trial, "metric_n_steps", None) or {}).get(metric, {})
    recent = list(kept.get("10") or kept.get("5") or [])  # Ray's last values of the metric, one per epoch
    values = {epoch - i: float(v) for i, v in enumerate(reversed(recent))}
    values[epoch] = float(value)
    records = {e: json.loads(r) for e, r in rungs.get(trial.trial_id, {}).items()}
    if isinstance(record := result.get(R.VAL_PER_CLASS), str):
        records[epoch] = json.loads(record)
    return Candidate(number, epoch, values, records)


#: The class's name before tables and studies shared one live view (a table's pickled run config names it so:
#: study.search.old_names).
TableProgress = CellProgress

"""The live table of a table's search: per cell, trials finished / budget, stopped early (by the table's scheduler;
they count as finished), running, failed (a lost trial is replaced:
study/search/cell_search.py), best validation score; in the header the trials finished and, once trials have finished in
this driver, the estimated time left (search and final stage).

The estimate is the rate at which this driver's trials have reported epochs, in model-epochs on all training classes
(:meth:`study.table.spec.Table.search_cost`: k folds train k−1 such models' worth), applied to what is left: the
search epochs not yet trained and every final run's. A resumed driver measures its own rate (a trial restored from
its checkpoint does not count the epochs it already had). It is printed, never acted on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TextIO

from study.final.best import pick_best
from study.progress import ThrottledTable, format_table
from study.table.spec import Table, cell_of
from trainables.schema.metric_names import EPOCH

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = ["TableProgress", "eta_text"]


def eta_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class TableProgress(ThrottledTable):
    """Per cell: trials finished of the budget, running, failed and the best validation score; the ETA in the header."""

    def __init__(self, table: Table, interval_s: float = 15.0, stream: TextIO | None = None) -> None:
        super().__init__(interval_s, stream)
        self.table = table
        self._started: float | None = None
        self._epochs_here = 0

    def _eta(self, trials: list[Trial]) -> str:
        if self._started is None or self._epochs_here == 0:
            return ""
        t, epochs = self.table, self.table.spec.train.epochs
        trained = sum(min(int((x.last_result or {}).get(EPOCH, 0)), epochs) for x in trials)
        per_epoch = (time.monotonic() - self._started) / (self._epochs_here * t.search_cost())
        # Under early stopping the search is expected to train its share of every trial's epochs (study.table.asha_cost).
        search_left = max(0.0, t.search_trials * epochs * t.search_share() - trained)
        left = (search_left * t.search_cost() + t.final_runs * epochs) * per_epoch
        return f"; ETA ≈ {eta_text(left)} (then {t.final_runs} final runs)"

    def render(self, trials: list[Trial]) -> str:
        metric, mode = self.table.base.search.metric, self.table.base.search.mode
        epochs = self.table.spec.train.epochs
        per_cell: dict[str, list[Trial]] = {c.label: [] for c in self.table.cells}
        for trial in trials:
            cell = cell_of(self.table.cells, trial.config)
            if cell is not None:
                per_cell[cell.label].append(trial)
        rows = []
        for label, members in per_cell.items():
            scored = [(t, (t.last_result or {}).get(metric)) for t in members if t.status == "TERMINATED"]
            best = pick_best(scored, lambda x: x[1], lambda x: x[0].trial_id, mode)
            rows.append(
                {
                    "cell": label,
                    "finished": f"{sum(t.status == 'TERMINATED' for t in members)}/{self.table.spec.search.num_trials}",
                    "stopped early": sum(
                        t.status == "TERMINATED" and int((t.last_result or {}).get(EPOCH, 0)) < epochs for t in members
                    ),
                    "running": sum(t.status == "RUNNING" for t in members),
                    "failed": sum(t.status == "ERROR" for t in members),
                    f"best {metric}": "" if best is None else best[1],
                }
            )
        done = sum(t.status == "TERMINATED" for t in trials)
        header = (
            f"== table {self.table.spec.name}: search trials {done}/{self.table.search_trials} finished"
            f"{self._eta(trials)}"
        )
        columns = ["cell", "finished", "stopped early", "running", "failed", f"best {metric}"]
        return f"{header}\n{format_table(rows, columns)}"

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        if self._started is None:
            self._started = time.monotonic()

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        self._epochs_here += 1
        super().on_trial_result(iteration, trials, trial, result, **info)

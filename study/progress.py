"""A compact live progress table of the study's trials, printed by the driver.

Ray's own reporter prints the full trial config (our whole spec); this one shows what a researcher scans
for: each trial's status, epoch, sampled hyperparameters and objective, and the best trial so far.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from ray.tune import Callback

from study.final.best import pick_best
from trainables.schema.metric_names import EPOCH

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = ["ProgressTable", "ThrottledTable", "format_table"]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


class ThrottledTable(Callback):
    """A live table printed at most every ``interval_s`` seconds and whenever a trial ends; subclasses say what it
    holds (:meth:`render`)."""

    def __init__(self, interval_s: float = 15.0, stream: TextIO | None = None) -> None:
        self.interval_s = interval_s
        self.stream = stream
        self._last = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stream": None}  # Ray pickles callbacks with the experiment; a stream is not state

    def render(self, trials: list[Trial]) -> str:
        raise NotImplementedError

    def _print(self, trials: list[Trial], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        print(self.render(trials), file=self.stream or sys.stdout, flush=True)

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        self._print(trials)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._print(trials, force=True)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._print(trials, force=True)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self._print(trials, force=True)


class ProgressTable(ThrottledTable):
    """Each trial's status, epoch, sampled parameters and metric, with the best so far."""

    def __init__(
        self,
        metric: str,
        mode: str,
        total_trials: int,
        total_epochs: int,
        param_names: list[str],
        interval_s: float = 15.0,
        stream: TextIO | None = None,
    ) -> None:
        self.metric = metric
        self.mode = mode
        self.total_trials = total_trials
        self.total_epochs = total_epochs
        self.param_names = param_names
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
        best = pick_best(rows, lambda r: r[self.metric], lambda r: r["trial"], self.mode)
        done = sum(t.status in ("TERMINATED", "ERROR") for t in trials)
        header = f"== trials {done}/{self.total_trials} done"
        if best is not None:
            header += f"; best {best['trial']} {self.metric}={_fmt(best[self.metric])}"
        return f"{header}\n{format_table(rows, ['trial', 'status', 'epoch', *self.param_names, self.metric])}"

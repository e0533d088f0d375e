"""The Tune callback that keeps the run's :class:`~study.search.cell_search.CellSearch` and Ray in one truth about
each trial (the lost trials' settlement and the restore's reconciliation: :mod:`study.search.cell_search`'s docstring).
A module of its own so that the callback, which Ray pickles with a new search's run config, has a path that does not
move with the searcher."""

from __future__ import annotations

from typing import Any, Protocol

from ray.tune import Callback

from study.runtime.shells import PickledAsDiscarded
from study.runtime.stopping import stopping

__all__ = ["ReconcileTrials"]

#: Ray's ``Trial.status`` values: a trial Ray runs (again) after a restore; one that ended; one that ended whole.
_TERMINATED = "TERMINATED"
_RUNS_AGAIN = frozenset({"PENDING", "RUNNING", "PAUSED"})
_ENDED = frozenset({_TERMINATED, "ERROR"})


class Reconciled(Protocol):
    """What the callback calls of :class:`~study.search.cell_search.CellSearch`."""

    def adopt_restored(self, trials: list[tuple[str, dict[str, Any]]]) -> list[str]: ...

    def reconcile(self, ray_trials: list[tuple[str, str, dict[str, Any] | None]]) -> list[str]: ...

    def settle_lost(self, runs_again: set[str]) -> list[str]: ...


class ReconcileTrials(PickledAsDiscarded, Callback):
    """The Tune callback that keeps a :class:`~study.search.cell_search.CellSearch` and Ray in one truth about each trial.

    ``restored``: on the stage's first step, before Ray asks for a trial, the searcher adopts the final trials Ray
    restored that its own snapshot does not know (:meth:`~study.search.cell_search.CellSearch.adopt_restored`) and reconciles the trials' ends
    with Ray's (:meth:`~study.search.cell_search.CellSearch.reconcile`). At the experiment's end, when it ended whole (every trial ended, no stop
    signal), after Ray's last snapshot: the held lost trials are told FAIL (:meth:`~study.search.cell_search.CellSearch.settle_lost`); after a
    stop they stay held, and the restore settles them. ``searcher`` is set once built (a new search builds it inside
    its Tuner's config); the callback is pickled with the Tuner without it.
    """

    def __init__(self, searcher: Reconciled | None = None, restored: bool = False) -> None:
        self.searcher = searcher
        self.restored = restored

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "searcher": None}

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        if self.restored and self.searcher is not None:
            self.restored = False
            self.searcher.adopt_restored([(t.trial_id, t.config or {}) for t in trials])
            self.searcher.reconcile([(t.trial_id, str(t.status), t.last_result or None) for t in trials])

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        if self.searcher is None or stopping() or any(str(t.status) not in _ENDED for t in trials):
            return
        self.searcher.settle_lost(set())

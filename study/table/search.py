"""The searcher of a table's one Ray Tune experiment: a small dispatcher over one
:class:`~study.bookkeeping.StudySearch` (Optuna behind Ray) per cell.

Why one experiment with a dispatching searcher, not one Tuner per cell: every cell's trials then share the cluster
under the table's ``max_concurrent`` (a Tuner per cell would run cells one after another, or need threads around
``Tuner.fit``, which Ray does not support in one driver); the table resumes as one experiment
(``Tuner.restore``: Ray pickles this searcher with its per-cell searchers at each snapshot, and each cell's
Optuna study adopts or fails the trials asked after the last snapshot exactly as a study does); and the final stage,
the MLflow callback and the progress table are the study's own. Each cell keeps its own Optuna study (its own TPE
history, readable name in optuna-dashboard), and its own budget: a new Ray trial goes to the cell with the fewest
trials asked so far (ties: table order) that may ask now, so the cells advance together and each sampler sees its
earlier trials. With ``search.reproducible`` each cell's sampler is ordered (:mod:`study.ordered_search`, lag
:attr:`~study.table.spec.Table.cell_lag`): what a cell samples depends on its own trials' outcomes, never on timing.
"""

from __future__ import annotations

import pickle
from typing import Any

from ray.tune.search import Searcher

from study.bookkeeping import StudySearch

__all__ = ["TableSearch"]


class TableSearch(Searcher):
    """Dispatches Ray trials to per-cell searchers, ``budget`` trials each.

    Lifecycle (Ray's ``Searcher`` protocol): ``suggest(trial_id)`` picks the cell, asks its searcher and returns the
    cell's fixed values (family, condition, the arm's params) with the sampled ones; ``on_trial_result`` and
    ``on_trial_complete`` go to the searcher that suggested the trial; ``save``/``restore`` pickle the whole
    dispatcher (Ray calls them at each experiment snapshot and on ``Tuner.restore``).
    """

    def __init__(
        self,
        cells: list[tuple[str, dict[str, Any], StudySearch]],
        budget: int,
        metric: str,
        mode: str,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.cells = cells
        self.budget = budget
        self.asked = [0] * len(cells)
        self.trial_cell: dict[str, int] = {}

    def suggest(self, trial_id: str) -> dict | None:
        index = self.trial_cell.get(trial_id)
        if index is not None:  # Ray asks again for a trial it was given (not in Ray 2.60's loop; kept safe)
            return self._config(index, self.cells[index][2].suggest(trial_id))
        open_cells = sorted((n, i) for i, n in enumerate(self.asked) if n < self.budget)
        if not open_cells:
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's own "no more trials" value
        for _, index in open_cells:
            # A cell's searcher returns None while its next trial must wait for an earlier one of the cell
            # (``search.reproducible``): the slot goes to the next cell, so a wait costs no idle slot while another
            # cell may ask. Which cell takes a slot depends on timing; what each cell samples does not.
            sampled = self.cells[index][2].suggest(trial_id)
            if sampled is not None:
                self.asked[index] += 1
                self.trial_cell[trial_id] = index
                return self._config(index, sampled)
        return None  # every open cell waits: Ray asks again on its next step

    def _config(self, index: int, sampled: dict | None) -> dict | None:
        return {**self.cells[index][1], **sampled} if isinstance(sampled, dict) else sampled

    def _searcher(self, trial_id: str) -> StudySearch | None:
        index = self.trial_cell.get(trial_id)
        return None if index is None else self.cells[index][2]

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if (searcher := self._searcher(trial_id)) is not None:
            searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if (searcher := self._searcher(trial_id)) is not None:
            searcher.on_trial_complete(trial_id, result=result, error=error)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))  # noqa: S301 - Ray's own snapshot of this searcher
        for _, _, searcher in self.cells:
            searcher.adopt_orphans()

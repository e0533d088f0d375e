"""The study's Ray searcher, :class:`StudySearch`: what Ray Tune's ``OptunaSearch`` does not keep for us,
Optuna trial states that match Ray's decisions, asks in an order timing cannot change
(:mod:`study.search.ordered_sampler`), and the Optuna trials a killed driver left behind. ASHA's rungs across a
driver restart are :mod:`study.search.persistent_asha`; the Optuna↔MLflow link is
:mod:`study.tracking.optuna_link`. Used by :mod:`study.search.tuners` and :mod:`study.search.cell_search`."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from optuna.exceptions import ExperimentalWarning
from ray.tune.search.optuna import OptunaSearch

from study.runtime.compat import (
    completed_trials_of,
    optuna_study_of,
    optuna_trials_of,
    storage_trial_id,
    study_storage,
)
from study.runtime.stopping import stopping
from study.search.ordered_sampler import may_ask
from study.tracking.outage import through_ray
from trainables.schema.errors import StoreOutageError
from trainables.schema.metric_names import EPOCH
from trainables.schema.record import OPTUNA_RAY_TRIAL_ID

logger = logging.getLogger(__name__)

__all__ = ["StudySearch"]


class StudySearch(OptunaSearch):
    """OptunaSearch whose Optuna trials end in the state Ray's decision means, asked in an order timing cannot
    change (``lag``: :mod:`study.search.ordered_sampler`), named by the study's metric, each carrying its Ray trial id.

    Ray's OptunaSearch tells Optuna COMPLETE for every trial that ends with a value, so a trial stopped
    early by ASHA would enter the sampler's history as if its partial value were final. Here a trial that
    ends before ``max_t`` epochs is PRUNED (Optuna then takes its last intermediate value as its value),
    a failed one FAIL. After a driver restart, Optuna trials the restored searcher never heard of (asked
    after Ray's last experiment snapshot, before the kill) do not stay RUNNING: one that never reported is
    adopted by the next new Ray trial (so the study still has exactly ``num_trials`` Optuna trials), one
    that reported intermediate values is marked FAIL (its Ray trial is gone).
    """

    def __init__(self, *args: Any, max_t: int, lag: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_t = max_t
        #: ``search.reproducible``: trial i is asked once trials <= i - lag have finished (study/search/ordered_sampler.py).
        self.lag = lag
        # optuna-dashboard and Optuna's plots name the objective by the study's metric instead of "Objective 0".
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # experimental since 3.2, unchanged in 5.0
            optuna_study_of(self).set_metric_names([self.metric])

    @through_ray
    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Tell Optuna how the trial ended: COMPLETE after ``max_t`` epochs, PRUNED before (its last value), FAIL on an
        error. Unlike Ray's ``OptunaSearch``, a ``tell`` the store refuses past its outage budget is not swallowed
        as a warning: it ends the driver (:func:`~study.tracking.outage.through_ray`), and ``--resume`` tells again."""
        import optuna

        self._blocked = False
        self.release_lost(trial_id)
        trials, study, done = optuna_trials_of(self), optuna_study_of(self), completed_trials_of(self)
        if trial_id in done or trial_id not in trials:
            return  # told already, or never asked by this searcher
        ot_trial = trials[trial_id]
        stored = study_storage(study).get_trial(storage_trial_id(ot_trial))
        if stored.state.is_finished():  # told before a driver restart (the snapshot held it RUNNING): it stands
            done.add(trial_id)
            return
        epochs = int((result or {}).get(EPOCH, (result or {}).get("training_iteration", 0)))
        value = (result or {}).get(self.metric)
        if value is None and not error and stored.intermediate_values:
            # A trial that ended whole without a result holding the metric: seen when a driver stopped (a warm head
            # killed) after the trial's last epoch reached Optuna and its checkpoint, but before Ray's snapshot held it
            # ended; restored from that last checkpoint, it ends at once and Ray hands over an empty result. Its last
            # epoch Optuna recorded is its end (a PRUNED here would disagree with MLflow's FINISHED run).
            epochs = max(stored.intermediate_values)
            value = stored.intermediate_values[epochs]
        if value is None:
            state = optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.PRUNED
        else:
            # Ray hands a trial's final result to on_trial_complete only: record it as the last intermediate too.
            if epochs not in stored.intermediate_values:
                ot_trial.report(float(value), epochs)
            state = optuna.trial.TrialState.COMPLETE if epochs >= self.max_t else optuna.trial.TrialState.PRUNED
        # PRUNED takes the last intermediate value as the trial's value (Optuna's rule). skip_if_finished: a trial told
        # by another driver between the read above and now is not told twice.
        told = value if state == optuna.trial.TrialState.COMPLETE else None
        try:
            study.tell(ot_trial, told, state=state, skip_if_finished=True)
        except StoreOutageError:
            raise
        except ValueError as exc:  # a value Optuna refuses (NaN): the trial fails, the study goes on
            logger.warning("Optuna refused trial %s's result (%s): it is marked FAIL", trial_id, exc)
            study.tell(ot_trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        done.add(trial_id)

    def hold_lost(self, trial_id: str) -> None:
        """The trial was lost, and its Optuna trial stays RUNNING until Ray's saved state settles it
        (:class:`~study.search.cell_search.CellSearch`): the ordered sampler's asks do not wait for it meanwhile."""
        self.__dict__.setdefault("_held_lost", set()).add(trial_id)
        self._blocked = False

    def release_lost(self, trial_id: str) -> None:
        """The held trial is settled: told, or run again by Ray (asks wait for it again)."""
        self.__dict__.setdefault("_held_lost", set()).discard(trial_id)

    @through_ray
    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Report the epoch's value to the trial's Optuna trial, unless Optuna was told the trial's end already: a
        driver killed after that ``tell`` and before Ray's next snapshot leaves the trial RUNNING in the snapshot,
        so Ray runs it on from its checkpoint and its epochs arrive again. Optuna refuses a report to a finished
        trial, which Ray would count as the trial's error (measured: the trial then failed after ``--resume``,
        its Optuna trial COMPLETE and its MLflow run FAILED). Optuna's record stands; the end is not told twice."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            super().on_trial_result(trial_id, result)
        except UpdateFinishedTrialError:
            completed_trials_of(self).add(trial_id)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        self.adopt_orphans()

    def adopt_orphans(self) -> None:
        """After a restore: FAIL the study's RUNNING Optuna trials that trained under a forgotten Ray trial; the
        next new Ray trials adopt those that never reported."""
        import optuna

        study = optuna_study_of(self)
        known = {storage_trial_id(t) for t in optuna_trials_of(self).values()}
        storage = study_storage(study)
        self._orphans: list[int] = []
        for frozen in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.RUNNING]):
            if storage_trial_id(frozen) in known:
                continue
            if frozen.intermediate_values:  # it trained under a Ray trial that the restore forgot
                storage.set_trial_state_values(storage_trial_id(frozen), optuna.trial.TrialState.FAIL)
            else:  # asked but never reported: the next new Ray trial adopts it, params and all
                self._orphans.append(storage_trial_id(frozen))

    @through_ray
    def suggest(self, trial_id: str) -> dict | None:
        import optuna

        if stopping():
            return None  # a stop signal: no new trial; the running ones drain (study.runtime.stopping)
        orphans = getattr(self, "_orphans", [])
        if trial_id not in optuna_trials_of(self) and self._must_wait(orphans):
            return None  # Ray asks again on its next step
        if orphans and trial_id not in optuna_trials_of(self):
            # Re-running the define-by-run space on an Optuna trial returns the values it already holds.
            optuna_trials_of(self)[trial_id] = optuna.trial.Trial(optuna_study_of(self), orphans.pop(0))
        config = super().suggest(trial_id)
        optuna_trials_of(self)[trial_id].set_user_attr(OPTUNA_RAY_TRIAL_ID, trial_id)
        return config

    def _must_wait(self, orphans: list[int]) -> bool:
        """``search.reproducible``: the next trial may not be asked yet. Ray asks on every step of its loop and only a
        trial's end can unblock the ask, so the storage is read again only after one (on_trial_complete clears
        ``_blocked``). A searcher pickled before the setting existed has no ``lag``: it goes on as it started."""
        if getattr(self, "lag", None) is None:
            return False
        self._blocked = getattr(self, "_blocked", False) or not self._may_ask(orphans)
        return self._blocked

    def _may_ask(self, orphans: list[int]) -> bool:
        """Whether the next Optuna trial (an orphan to adopt, else a new one) may be sampled now: every trial
        ``lag`` or more before it has finished. A RUNNING trial no live Ray trial of this searcher holds (a driver
        died before its Ray trial was snapshotted) will never finish: it is marked FAIL instead of waited for."""
        import optuna

        lag = self.lag
        assert lag is not None
        study = optuna_study_of(self)
        trials = study.get_trials(deepcopy=False)
        number = next(t.number for t in trials if storage_trial_id(t) == orphans[0]) if orphans else len(trials)
        done, asked = completed_trials_of(self), optuna_trials_of(self)
        held = {storage_trial_id(t) for rid, t in asked.items() if rid not in done} | set(orphans)
        for t in trials:
            if t.number <= number - lag and not t.state.is_finished() and storage_trial_id(t) not in held:
                study_storage(study).set_trial_state_values(storage_trial_id(t), optuna.trial.TrialState.FAIL)
        lost = {storage_trial_id(asked[rid]) for rid in self.__dict__.get("_held_lost", ()) if rid in asked}
        return may_ask([t for t in study.get_trials(deepcopy=False) if storage_trial_id(t) not in lost], number, lag)

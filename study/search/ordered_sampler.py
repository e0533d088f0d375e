"""Reproducible searches under concurrency: trial *i* is sampled from a history that depends on *i* alone.

With ``max_concurrent = c`` trials in flight, an asynchronous sampler sees whichever trials happen to have finished
when a slot frees up, so the same spec gives another study when one trial runs a little slower (measured in issue
33: trials 14–15 of a 16-trial, 2-concurrent study changed once TPE left its start-up phase). Here (``search.
reproducible``, the default) trial *i*

* is asked only once trials 0 … i − c have all finished (:func:`may_ask`), and
* is sampled from the view :func:`trials_seen_by` gives the sampler: trials 0 … i − c as they ended, trials
  i − c + 1 … i − 1 as RUNNING with their parameters only (their values, intermediate values and states, which
  depend on timing, are hidden; a ``constant_liar`` TPE treats them as pending, as it would in a real run).

So the view is a function of *i* (and the finished trials' deterministic outcomes), never of timing, and the
sampler's random state advances in trial order (trials are asked one after another). The cost is idle slots: a
free slot waits while trial i − c is still running (measured in docs/notebook/reproducibility.md). With ``c = 1`` the
view is every earlier trial, as without this module. Two things stay timing-dependent and are said so in
docs/notebook/reproducibility.md: ASHA's stopping decisions (which trials reach a rung first) and ``max_concurrent`` itself, which is part
of the algorithm like a batch size.

Optuna offers no hook for "sample from this subset of trials"; :class:`OrderedSampler` wraps any sampler and hands
it a copy of the study whose trial list is the view (:func:`study.runtime.compat.study_with_trials`).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from study.runtime.compat import storage_trial_id, study_trials, study_with_trials

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

__all__ = ["OrderedSampler", "may_ask", "trials_seen_by"]


def may_ask(trials: Sequence[FrozenTrial], number: int, lag: int) -> bool:
    """Whether trial ``number`` may be sampled: every trial numbered ``<= number - lag`` has finished."""
    return all(t.state.is_finished() for t in trials if t.number <= number - lag)


def _pending(trial: FrozenTrial) -> FrozenTrial:
    """``trial`` as the sampler sees a trial still in flight: its parameters, no outcome."""
    return FrozenTrial(
        number=trial.number,
        state=TrialState.RUNNING,
        value=None,
        values=None,
        datetime_start=trial.datetime_start,
        datetime_complete=None,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs=trial.user_attrs,
        system_attrs=trial.system_attrs,
        intermediate_values={},
        trial_id=storage_trial_id(trial),
    )


def trials_seen_by(trials: Sequence[FrozenTrial], number: int, lag: int) -> list[FrozenTrial]:
    """The history trial ``number`` is sampled from: trials ``<= number - lag`` as they are (all finished, see
    :func:`may_ask`), later earlier trials as pending, trial ``number`` itself as it is, later trials not at all."""
    seen = []
    for t in trials:
        if t.number <= number - lag or t.number == number:
            seen.append(t)
        elif t.number < number:
            seen.append(_pending(t))
    return seen


class OrderedSampler(optuna.samplers.BaseSampler):
    """``inner`` sampling each trial from :func:`trials_seen_by` (``lag`` = the study's ``max_concurrent``).

    Lifecycle: ``before_trial``, ``infer_relative_search_space``, ``sample_relative`` and ``sample_independent``
    run while a trial is asked and see the view; ``after_trial`` runs when a trial ends (in timing order) and sees
    the real study, as Optuna's samplers only record there.
    """

    def __init__(self, inner: optuna.samplers.BaseSampler, lag: int) -> None:
        self.inner = inner
        self.lag = lag

    def _view(self, study: optuna.Study, number: int) -> optuna.Study:
        def get_trials(
            deepcopy: bool = True, states: Container[TrialState] | None = None, use_cache: bool = False
        ) -> list[FrozenTrial]:
            every = study_trials(study, deepcopy, use_cache)
            seen = trials_seen_by(every, number, self.lag)
            return [t for t in seen if states is None or t.state in states]

        return study_with_trials(study, get_trials)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(self._view(study, trial.number), trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(self._view(study, trial.number), trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study, trial.number), trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.inner.sample_independent(self._view(study, trial.number), trial, param_name, param_distribution)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

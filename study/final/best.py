"""The one definition of "the best configuration" that the final stage, the study's outcome, ``--status`` and the
dashboards share.

The rule: among the candidates whose value of the search metric is a finite number, the one with the best value
(largest for ``mode: max``, smallest for ``mode: min``); **ties go to the earliest trial**: the smallest key the
caller gives, Optuna's trial number for the search (the order trials were asked in; ``--status`` reads it from
Optuna, the final stage maps Ray trial ids to it, :func:`study.final.stage.creation_order`, the dashboards read each
run's ``optuna_trial_number`` tag). Ray's trial ids are random hex under a searcher, so they break a tie only where no
number exists. The tie-break does not depend on the order a store or a restored ``ResultGrid`` returns the candidates
in, nor on the run: a resumed driver, a rerun of the study, ``--status`` and a dashboard built later pick the same
trial. Ties are common on tiny studies (Recall@1 over a few hundred queries takes few values).

A configuration repeated over seeds is ranked by its mean (the dashboards' ``best_configs``); its trial id for the
tie-break is then its smallest one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

__all__ = ["pick_best", "best_by_group", "best_full_trial", "ranked_full_trials", "is_finite_number"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def is_finite_number(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (``bool`` is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def pick_best(candidates: Iterable[T], value: Callable[[T], Any], trial_id: Callable[[T], Any], mode: str) -> T | None:
    """The candidate with the best finite ``value`` under ``mode`` (``max``/``min``), ties to the smallest
    ``trial_id``; ``None`` when no candidate has a finite value."""
    sign = 1.0 if mode == "max" else -1.0
    best: T | None = None
    best_value = -math.inf
    for candidate in sorted((c for c in candidates if is_finite_number(value(c))), key=trial_id):
        v = sign * float(value(candidate))
        if best is None or v > best_value:  # strictly better: an equal value keeps the earlier trial
            best, best_value = candidate, v
    return best


def best_by_group(
    candidates: Iterable[T], group: Callable[[T], K], value: Callable[[T], Any], trial_id: Callable[[T], Any], mode: str
) -> dict[K, T]:
    """:func:`pick_best` within each ``group`` (groups without a finite value are left out)."""
    groups: dict[K, list[T]] = {}
    for candidate in candidates:
        groups.setdefault(group(candidate), []).append(candidate)
    picked = {key: pick_best(members, value, trial_id, mode) for key, members in groups.items()}
    return {key: best for key, best in picked.items() if best is not None}


def best_full_trial(
    candidates: Iterable[T],
    value: Callable[[T], Any],
    full: Callable[[T], bool],
    trial_id: Callable[[T], Any],
    mode: str,
) -> T | None:
    """One group's best search trial: :func:`pick_best` among its trials that trained every epoch (``full``) where any
    did. Under early stopping a stopped trial's last value is of an earlier epoch than a full trial's, so not
    comparable: the winner is the best trial that trained every epoch (Optuna's COMPLETE, as ``--status`` picks it),
    and a group where none did keeps the best of what it has. The final stage after the search
    (:func:`study.final.stage.best_per_group`) and the one a table starts per cell inside the search
    (:class:`study.search.cell_search.CellSearch`) both pick by it."""
    ranked = ranked_full_trials(candidates, value, full, trial_id, mode)
    return ranked[0] if ranked else None


def ranked_full_trials(
    candidates: Iterable[T],
    value: Callable[[T], Any],
    full: Callable[[T], bool],
    trial_id: Callable[[T], Any],
    mode: str,
) -> list[T]:
    """One group's search trials by :func:`best_full_trial`'s rule, best first: among the trials that trained every
    epoch where any did, finite values only, ties to the earlier trial; its first is :func:`best_full_trial`'s pick.
    A stage that retrains a group's best k takes its first k."""
    members = list(candidates)
    pool = [c for c in members if full(c)] or members
    sign = 1.0 if mode == "max" else -1.0
    finite = sorted((c for c in pool if is_finite_number(value(c))), key=trial_id)  # stable: equal values keep this
    return sorted(finite, key=lambda c: -sign * float(value(c)))

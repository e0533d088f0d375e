"""What early stopping is expected to leave of a cell's search: the share of its trials' epochs ASHA lets them train.

Written by hand because the textbook figure (a share 1/η of the trials reaches each next rung) holds for many trials,
and a table's cell has 8-16: asynchronous ASHA promotes the first trial to reach a rung unconditionally and compares
each later one with the few values recorded before it, so a small cell promotes more than 1/η. The size line printed
before a table starts gives both: :func:`asymptotic_share` and :func:`expected_share`, the latter Ray's own rule
(:class:`ray.tune.schedulers.ASHAScheduler`: stop below the (1 − 1/η) quantile of the rung's earlier values, at the
first epoch ≥ each milestone grace · η^k below ``max_t``) applied to ``trials`` trials whose scores are exchangeable
(any arrival order equally likely; correlated scores across rungs change nothing, since a rung compares only the trials
that reached it, in their arrival order), averaged over a fixed-seed simulation, so the line is the same every time.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import TYPE_CHECKING

from trainables.schema.space import halving_rungs

if TYPE_CHECKING:
    from trainables.schema.space import SchedulerSpec

__all__ = [
    "milestones",
    "asymptotic_share",
    "expected_share",
    "halving_share",
    "halving_rule_rungs",
    "scheduler_share",
    "kept_count",
    "halving_survivors",
    "full_trials",
]

#: Simulated cells behind :func:`expected_share` (its standard error is below half a percentage point).
_REPEATS = 400


def milestones(max_t: int, grace_period: int, reduction_factor: float) -> list[float]:
    """Ray's rungs of one bracket below ``max_t`` (``grace · η^k``, k < ⌊log_η(max_t / grace)⌋ + 1); at ``max_t`` a
    trial stops anyway."""
    count = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1)
    return [grace_period * reduction_factor**k for k in range(count) if grace_period * reduction_factor**k < max_t]


def _epochs_at(milestone: float) -> int:
    return math.ceil(milestone)  # the first reported epoch at or past the milestone decides


def asymptotic_share(max_t: int, grace_period: int, reduction_factor: float) -> float:
    """Many trials: a share η^-k of them passes rung k, the rest stop there."""
    rungs = milestones(max_t, grace_period, reduction_factor)
    epochs, reach = 0.0, 1.0
    for milestone in rungs:
        passing = reach / reduction_factor
        epochs += (reach - passing) * _epochs_at(milestone)
        reach = passing
    return (epochs + reach * max_t) / max_t


def _cutoff(values: list[float], quantile: float) -> float:
    xs = sorted(values)
    pos = quantile * (len(xs) - 1)
    low = int(pos)
    return xs[low] + (xs[min(low + 1, len(xs) - 1)] - xs[low]) * (pos - low)


@lru_cache(maxsize=64)
def expected_share(max_t: int, grace_period: int, reduction_factor: float, trials: int) -> float:
    """``trials`` trials of one cell, arriving in turn at every rung: the mean share of ``max_t`` epochs they train."""
    rungs = milestones(max_t, grace_period, reduction_factor)
    rng = random.Random(0)
    quantile = 1 - 1 / reduction_factor
    total = 0
    for _ in range(_REPEATS):
        recorded: list[list[float]] = [[] for _ in rungs]
        for _ in range(trials):
            trained = max_t
            for k, milestone in enumerate(rungs):
                value = rng.random()
                stop = bool(recorded[k]) and value < _cutoff(recorded[k], quantile)
                recorded[k].append(value)
                if stop:
                    trained = _epochs_at(milestone)
                    break
            total += trained
    return total / (_REPEATS * trials * max_t)


def halving_share(epochs: int, first_rung: int, eta: float, n: int, hedge: int = 0) -> float:
    """Synchronous successive halving (:mod:`study.search.halving`) on a cell of ``n`` trials: the share of FIFO's
    model-epochs (``n · epochs``) its trials train, exactly: every rung keeps the same number of trials whatever the
    scores, so no expectation is needed. ``halving_share(60, 8, 2, 16)``: rungs at 8, 16, 32, 16 → 8 → 4 → 2
    trials, (8·8 + 4·16 + 2·32 + 2·60) / (16·60) = 32.5 %. Trials lost to errors are not counted."""
    reach, trained = n, 0
    for rung in halving_rungs(epochs, first_rung, eta):
        kept = kept_count(reach, eta, hedge)
        trained += (reach - kept) * rung
        reach = kept
    return (trained + reach * epochs) / (n * epochs)


def halving_survivors(epochs: int, first_rung: int, eta: float, n: int, hedge: int = 0) -> int:
    """How many of a cell's ``n`` trials synchronous halving lets train every epoch: what its last rung keeps
    (:func:`kept_count` rung after rung), whatever the scores."""
    for _ in halving_rungs(epochs, first_rung, eta):
        n = kept_count(n, eta, hedge)
    return n


def halving_rule_rungs(epochs: int, first_rung: int, eta: float) -> list[int]:
    """Halving's rungs (:func:`trainables.schema.space.halving_rungs`), for the size line."""
    return halving_rungs(epochs, first_rung, eta)


def kept_count(n: int, eta: float, hedge: int = 0) -> int:
    """How many of ``n`` trials at a rung of synchronous halving go on: ``max(⌈n / η⌉, min(hedge, n))``."""
    return max(math.ceil(round(n / eta, 9)), min(hedge, n)) if n > 0 else 0


def scheduler_share(scheduler: SchedulerSpec, epochs: int, trials: int) -> float:
    """The expected share of a cell's search model-epochs its trials train under ``scheduler`` (``trials`` a cell):
    1 for FIFO, ASHA's simulated expectation (:func:`expected_share`), halving's exact share (:func:`halving_share`)."""
    if scheduler.type == "asha":
        return expected_share(epochs, scheduler.grace_period, scheduler.reduction_factor, trials)
    if scheduler.type == "halving":
        return halving_share(epochs, scheduler.first_rung, scheduler.reduction_factor, trials, scheduler.hedge)
    return 1.0


def full_trials(scheduler: SchedulerSpec, epochs: int, trials: int) -> int:
    """How many of a cell's ``trials`` train every epoch under ``scheduler`` (the candidates of its finalist race):
    halving's exact survivors (:func:`halving_survivors`); every trial without a scheduler; under ASHA the count
    depends on the scores, so every trial bounds it."""
    if scheduler.type == "halving":
        return halving_survivors(epochs, scheduler.first_rung, scheduler.reduction_factor, trials, scheduler.hedge)
    return trials

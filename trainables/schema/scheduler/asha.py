"""``asha``: asynchronous successive halving, one rung set per cell (Ray's ASHA rule; ``study/search/cell_asha.py``).

Its share of FIFO's model-epochs is an expectation, written by hand because the textbook figure (a share 1/η of the
trials reaches each next rung) holds for many trials, and a table's cell has 8-16: asynchronous ASHA promotes the
first trial to reach a rung unconditionally and compares each later one with the few values recorded before it, so a
small cell promotes more than 1/η. The plan's size line gives both: :func:`asymptotic_share` and
:func:`expected_share`, the latter Ray's own rule (:class:`ray.tune.schedulers.ASHAScheduler`: stop below the (1 − 1/η)
quantile of the rung's earlier values, at the first epoch ≥ each milestone grace · η^k below ``max_t``) applied to
``trials`` trials whose scores are exchangeable (any arrival order equally likely; correlated scores across rungs
change nothing, since a rung compares only the trials that reached it, in their arrival order), averaged over a
fixed-seed simulation, so the line is the same every time.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import Literal

from pydantic import Field

from trainables.schema.scheduler.base import SchedulerSpec

__all__ = ["AshaSpec", "milestones", "asymptotic_share", "expected_share"]

#: Simulated cells behind :func:`expected_share` (its standard error is below half a percentage point).
_REPEATS = 400


class AshaSpec(SchedulerSpec):
    """Ray's ASHA per cell: a trial reaching a rung goes on or stops at once, against the values its cell recorded
    there before it."""

    type: Literal["asha"] = "asha"
    #: Epochs a trial always gets before it can be stopped.
    grace_period: int = Field(1, ge=1)
    #: η; a rung keeps about 1/η of the trials that reach it.
    reduction_factor: float = Field(3.0, gt=1)

    stops_early = True

    def check_table(self, epochs: int, num_trials: int, validated: bool) -> None:
        super().check_table(epochs, num_trials, validated)
        if self.grace_period >= epochs:
            raise ValueError(
                f"search.scheduler.grace_period {self.grace_period} must be below train.epochs {epochs}: ASHA could "
                "never stop a trial"
            )

    def share(self, epochs: int, trials: int) -> float:
        return expected_share(epochs, self.grace_period, self.reduction_factor, trials)

    def summary(self) -> str:
        return f"grace {self.grace_period}, η {self.reduction_factor:g}"

    def describe(self, epochs: int, trials: int) -> str:
        rungs = ", ".join(f"{m:g}" for m in milestones(epochs, self.grace_period, self.reduction_factor))
        asymptote = asymptotic_share(epochs, self.grace_period, self.reduction_factor)
        return (
            f"asha per cell ({self.summary()}, rungs at epoch {rungs} of {epochs}): the search ≈ "
            f"{self.share(epochs, trials):.0%} of its model-epochs (expected for {trials} trials a cell; "
            f"{asymptote:.0%} for many)"
        )


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

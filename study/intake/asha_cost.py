"""What early stopping is expected to leave of a cell's search, under the names the plan, the bill, the docs and the
benchmarks use: each scheduler kind computes its own share (:meth:`~trainables.schema.scheduler.SchedulerSpec.share`)
in its module of :mod:`trainables.schema.scheduler`, ASHA's simulation and halving's exact count included."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainables.schema.scheduler.asha import asymptotic_share, expected_share, milestones
from trainables.schema.scheduler.halving import halving_share, halving_survivors, kept_count

if TYPE_CHECKING:
    from trainables.schema.scheduler import SchedulerSpec

__all__ = [
    "milestones",
    "asymptotic_share",
    "expected_share",
    "halving_share",
    "scheduler_share",
    "kept_count",
    "halving_survivors",
    "full_trials",
]


def scheduler_share(scheduler: SchedulerSpec, epochs: int, trials: int) -> float:
    """The expected share of a cell's search model-epochs its trials train under ``scheduler`` (``trials`` a cell):
    the kind's own (1 for FIFO, ASHA's simulated expectation, halving's exact share)."""
    return scheduler.share(epochs, trials)


def full_trials(scheduler: SchedulerSpec, epochs: int, trials: int) -> int:
    """How many of a cell's ``trials`` train every epoch under ``scheduler`` (the candidates a later stage may retrain):
    the kind's own count (halving's exact survivors; every trial otherwise, which bounds ASHA's)."""
    return scheduler.full_trials(epochs, trials)

"""``halving``: synchronous successive halving per cell, every trial of a cell ranked at each rung
(``study/search/halving.py``, where the rule is spelled out). Its share of FIFO's model-epochs is exact: every rung
keeps the same number of trials whatever the scores."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field

from trainables.schema.scheduler.base import SchedulerSpec

__all__ = [
    "HalvingSpec",
    "halving_rungs",
    "kept_count",
    "halving_share",
    "halving_survivors",
]


class HalvingSpec(SchedulerSpec):
    """A cell's rung waits for every trial of the cell, then keeps the best :func:`kept_count` of them."""

    type: Literal["halving"] = "halving"
    #: The epoch of the first rung; rungs at ⌈first_rung · η^k⌉ below ``train.epochs``.
    first_rung: int = Field(1, ge=1)
    #: η; a rung keeps about 1/η of the trials that reach it.
    reduction_factor: float = Field(3.0, gt=1)
    #: Each rung keeps max(⌈n/η⌉, min(hedge, n)) of its n trials, so ``hedge`` trials of every cell run to the end
    #: (the best ``hedge`` at each rung).
    hedge: int = Field(0, ge=0)

    stops_early = True
    dumped_as_before: ClassVar[dict[str, Any]] = {"grace_period": 1}

    def check(self, epochs: int, num_trials: int) -> None:
        """A rung below ``train.epochs``, and a hedge below ``search.num_trials``."""
        if self.first_rung >= epochs:
            raise ValueError(
                f"search.scheduler.first_rung {self.first_rung} must be below train.epochs {epochs}: halving could "
                "never stop a trial"
            )
        if self.hedge >= num_trials:
            raise ValueError(
                f"search.scheduler.hedge {self.hedge} must be below search.num_trials {num_trials}: every trial of a "
                "cell would run to the end"
            )

    def share(self, epochs: int, trials: int) -> float:
        return halving_share(epochs, self.first_rung, self.reduction_factor, trials, self.hedge)

    def full_trials(self, epochs: int, trials: int) -> int:
        return halving_survivors(epochs, self.first_rung, self.reduction_factor, trials, self.hedge)

    def lag(self, trials_per_cell: int) -> int | None:
        """The cell's budget. A rung waits for every trial of its cell, so none may wait for an earlier one to end
        (which it does only after the rung): with the lag at the budget every trial is asked at once, each sampled
        knowing none of its cell's outcomes, in an order timing cannot change (``search.reproducible`` holds)."""
        return trials_per_cell

    def checkpoint_epochs(self, epochs: int) -> frozenset[int]:
        """Every rung epoch, whatever ``train.checkpoint_every`` says: halving PAUSEs a trial at a rung, and Ray
        resumes a kept one from the checkpoint of its last report; with none there it retrained from an older one
        (measured: epochs 1, 2, 1, 2, 3, 4 with ``checkpoint_every: 3`` and a rung at 2), so the model that went on
        was not the one ranked, and the replayed epochs were in no bill."""
        return frozenset({*halving_rungs(epochs, self.first_rung, self.reduction_factor), epochs})

    def summary(self) -> str:
        return f"first rung {self.first_rung}, η {self.reduction_factor:g}, hedge {self.hedge}"

    def describe(self, epochs: int, trials: int) -> str:
        rungs = ", ".join(str(r) for r in halving_rungs(epochs, self.first_rung, self.reduction_factor))
        return (
            f"halving per cell ({self.summary()}, rungs at epoch {rungs} of {epochs}): the search = "
            f"{self.share(epochs, trials):.0%} of its model-epochs (exact for {trials} trials a cell)"
        )

    def inline(self) -> str:
        hedge = f", hedge: {self.hedge}" if self.hedge else ""
        return f"{{type: halving, first_rung: {self.first_rung}, reduction_factor: {self.reduction_factor:g}{hedge}}}"


def halving_rungs(max_t: int, first_rung: int, eta: float) -> list[int]:
    """The rungs' epochs of ``halving``: ``⌈first_rung · η^k⌉`` for k = 0, 1, … while below ``max_t`` (at ``max_t`` a
    trial ends anyway), each epoch once. Here, not in study/search/halving.py, because the trainable needs them too:
    it checkpoints every rung epoch (:meth:`HalvingSpec.checkpoint_epochs`)."""
    rungs: list[int] = []
    k = 0
    while (epoch := math.ceil(round(first_rung * eta**k, 9))) < max_t:
        if not rungs or epoch > rungs[-1]:
            rungs.append(epoch)
        k += 1
    return rungs


def kept_count(n: int, eta: float, hedge: int = 0) -> int:
    """How many of ``n`` trials at a rung of synchronous halving go on: ``max(⌈n / η⌉, min(hedge, n))``."""
    return max(math.ceil(round(n / eta, 9)), min(hedge, n)) if n > 0 else 0


def halving_share(epochs: int, first_rung: int, eta: float, n: int, hedge: int = 0) -> float:
    """Synchronous successive halving on a cell of ``n`` trials: the share of FIFO's model-epochs (``n · epochs``) its
    trials train, exactly: every rung keeps the same number of trials whatever the scores, so no expectation is
    needed. ``halving_share(60, 8, 2, 16)``: rungs at 8, 16, 32, 16 → 8 → 4 → 2 trials, (8·8 + 4·16 + 2·32 + 2·60) /
    (16·60) = 32.5 %. Trials lost to errors are not counted."""
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

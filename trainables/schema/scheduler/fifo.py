"""``fifo``: every trial runs to the end (Ray's ``FIFOScheduler``); the default."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from trainables.schema.scheduler.base import SchedulerSpec
from trainables.schema.scheduler.halving import HalvingSpec

__all__ = ["FifoSpec"]


class FifoSpec(SchedulerSpec):
    """No early stopping. It keeps a stopping kind's keys (``grace_period``, ``first_rung`` …) with a note: a spec
    may hold them ready for ``--set search.scheduler.type=…``, and the bill's suggestion reads them
    (:meth:`cheaper`)."""

    type: Literal["fifo"] = "fifo"

    dumped_as_before: ClassVar[dict[str, Any]] = {"grace_period": 1, "reduction_factor": 3.0}

    @classmethod
    def foreign_key(cls, key: str, value: Any, owners: list[str]) -> Any:
        return value  # kept, and named in one note (SchedulerSpec._other_kinds_keys)

    def cheaper(self, epochs: int, trials: int) -> SchedulerSpec | None:
        """Halving, with the keys this spec keeps for it (its first rung below ``epochs``); ``None`` where no rung
        fits or a cell has a single trial."""
        first = min(self._kept.get("first_rung", 1), epochs - 1)
        if first < 1 or trials < 2:
            return None
        return HalvingSpec(first_rung=first, reduction_factor=self._kept.get("reduction_factor", 3.0))

"""The scheduler kinds of ``search.scheduler`` (``fifo``, ``asha``, ``halving`` …), one module each, found by name
(:func:`~trainables.schema.scheduler.base.scheduler_kinds`): the torch- and Ray-free half of each kind, as a loss
family's ``params.py`` is. :class:`SchedulerSpec` is their union (:mod:`trainables.schema.scheduler.base`)."""

from __future__ import annotations

from trainables.schema.scheduler.base import SchedulerSpec, kind_named, note_once, scheduler_kinds

__all__ = ["SchedulerSpec", "kind_named", "note_once", "scheduler_kinds", "SCHEDULER_NAMES"]

#: Every kind's name, found from this folder's modules.
SCHEDULER_NAMES: tuple[str, ...] = tuple(scheduler_kinds())
# The base's own validator becomes the union now that the kinds exist: SchedulerSpec.model_validate(...) is a kind.
SchedulerSpec.model_rebuild(force=True)

"""What Ray pickles of the study's own objects, named in one module that does not move.

Ray Tune pickles the Tuner (``tuner.pkl``: its run config with every callback, its searcher and scheduler) when a
stage starts, and unpickles it on ``Tuner.restore``. A pickle names each object's class by module path, so every
class it holds became a persistence format: moving one broke the resume of every study started before the move
(``study/search/old_names.py`` is that ledger). What a restored driver does not need from the pickle should not be
in it:

- **Callbacks.** A restored driver gives the Tuner its own callbacks and drops the unpickled ones
  (:func:`study.search.tuners.stage_tuner`). So each of the study's callbacks pickles as :class:`Discarded` through
  :class:`PickledAsDiscarded`: the pickle names this module and the class's name as a string, nothing it holds (the
  plan, the spec, the searcher, the MLflow link), and a moved callback class cannot break a resume.

The searcher and the scheduler are restored from the pickle and used; their state is the study directory's
(the scheduler's: :mod:`study.search.scheduler_state`).

This module must not move or rename what it defines: older pickles name it.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

__all__ = ["Discarded", "PickledAsDiscarded", "discarded"]


class Discarded(Callback):
    """What one of the study's callbacks unpickles as: a callback that does nothing, dropped by the restored driver.
    ``name`` is the class it stood for (for a reader of the pickle)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Discarded({self.name!r})"


def discarded(name: str) -> Discarded:
    """The unpickling of a :class:`PickledAsDiscarded` object (pickles name this function: keep its name)."""
    return Discarded(name)


class PickledAsDiscarded:
    """Mixin for the study's Ray Tune callbacks: pickled as :func:`discarded` with the class's name.

    ``copy.copy``/``deepcopy`` go through the same hook, so neither the study nor Ray may copy a callback (neither
    does: Ray copies the run config shallowly, the callback list shared)."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return discarded, (type(self).__qualname__,)

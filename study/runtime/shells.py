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

- **Schedulers.** A restored driver uses the unpickled scheduler, but the one Ray pickled at the stage's start holds
  nothing a new one built from the spec would not: its rungs are the study directory's
  (:mod:`study.search.scheduler_state`). So each pickles through :class:`PickledAsArguments` as its kind's name and
  the plain arguments that build it (cells, rule, state file), and unpickles by :func:`rebuilt`, which finds the
  class by that name (:data:`KINDS`): the code, not the pickle, says where a kind lives.

The searcher is restored from the pickle and used (its live state included): not yet a shell.

This module must not move or rename what it defines: older pickles name it.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from ray.tune import Callback

__all__ = ["Discarded", "PickledAsDiscarded", "discarded", "KINDS", "PickledAsArguments", "rebuilt"]

#: Each rebuildable kind's home: ``(module, class)``, the class having ``from_arguments(**arguments)``. A class that
#: moves changes its line here; the pickles keep naming the kind.
KINDS: dict[str, tuple[str, str]] = {
    "cell_asha": ("study.search.cell_asha", "CellASHA"),
    "halving": ("study.search.halving", "HalvingScheduler"),
}


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


def rebuilt(kind: str, arguments: dict[str, Any]) -> Any:
    """The unpickling of a :class:`PickledAsArguments` object: its kind's class built from the plain arguments
    (pickles name this function: keep its name)."""
    module, name = KINDS[kind]
    return getattr(importlib.import_module(module), name).from_arguments(**arguments)


class PickledAsArguments:
    """Mixin: pickled as :func:`rebuilt` with the class's :attr:`KIND` and :meth:`arguments` (plain data only: names,
    numbers, lists and dicts of them), so that the pickle names no class of the study.

    A copy goes through the same hook and is a new object built from the arguments, without the live state: neither
    the study nor Ray copies a scheduler (Ray keeps the one it is given)."""

    #: The kind's name in :data:`KINDS` (what the pickle holds).
    KIND: ClassVar[str]

    def arguments(self) -> dict[str, Any]:
        """What :meth:`from_arguments` takes to build the same object as new."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, tuple[str, dict[str, Any]]]:
        return rebuilt, (self.KIND, self.arguments())

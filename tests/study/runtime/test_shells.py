"""What Ray pickles of the study's callbacks (:mod:`study.runtime.shells`): each unpickles as a ``Discarded`` that
names its class, and a pickle of them names no module of the study but the shells' own, so moving a callback class
cannot break a resume. Every Ray Tune callback the study defines is held to it (a new one that forgets the mixin
fails here). The end-to-end check on a real ``tuner.pkl`` is in tests/study/search/test_table_asha_resume.py."""

from __future__ import annotations

import importlib
import pickle
import pickletools
import pkgutil

import pytest
from ray.tune import Callback

import study
from study.runtime.shells import Discarded, PickledAsDiscarded

OURS = ("study.", "trainables.", "dashboards.")


def pickled_modules(data: bytes) -> set[str]:
    """The study's modules a pickle names (each class or function is found by its module's name, a string)."""
    strings = [arg for op, arg, _ in pickletools.genops(data) if op.name.endswith("UNICODE")]
    return {s for s in strings if isinstance(s, str) and s.startswith(OURS)}


def _study_callbacks() -> list[type]:
    for info in pkgutil.walk_packages(study.__path__, "study."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found, todo = set(), list(Callback.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("study.") and cls is not Discarded:
            found.add(cls)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_the_study_defines_its_callbacks_where_the_contract_below_finds_them():
    names = {c.__qualname__ for c in _study_callbacks()}
    assert {"ThrottledTable", "MlflowTrialCallback", "StopOnSignal", "StageLedger", "ReconcileTrials"} <= names


@pytest.mark.parametrize("cls", _study_callbacks(), ids=lambda c: c.__qualname__)
def test_every_callback_of_the_study_pickles_as_discarded(cls):
    assert issubclass(cls, PickledAsDiscarded), f"{cls.__module__}.{cls.__qualname__} lacks PickledAsDiscarded"
    data = pickle.dumps([object.__new__(cls)])  # what Ray's tuner.pkl holds: the run config's callback list
    assert pickled_modules(data) == {"study.runtime.shells"}
    (back,) = pickle.loads(data)
    assert isinstance(back, Discarded) and back.name == cls.__qualname__
    assert back.on_trial_result(iteration=1, trials=[], trial=None, result={}) is None  # a callback that does nothing

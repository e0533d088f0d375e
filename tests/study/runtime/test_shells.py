"""What Ray pickles of the study's callbacks (:mod:`study.runtime.shells`): each unpickles as a ``Discarded`` that
names its class, and a pickle of them names no module of the study but the shells' own, so moving a callback class
cannot break a resume. Every Ray Tune callback the study defines is held to it (a new one that forgets the mixin
fails here). The end-to-end check on a real ``tuner.pkl`` is in tests/study/search/test_table_asha_resume.py."""

from __future__ import annotations

import importlib
import pickle
import pickletools
import pkgutil
from types import SimpleNamespace

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


def test_a_scheduler_pickles_as_its_kind_and_arguments_and_comes_back_with_its_rungs_from_the_study(tmp_path):
    """What Ray's tuner.pkl holds of a scheduler: its kind's name and the arguments that build it, no class of the
    study. Unpickled, it is the same kind built new, and its first call reads the rungs the study directory holds."""
    from study.search.cell_asha import rung_values
    from tests.study.search.test_halving import Loop, _values
    from tests.study.search.test_halving import _scheduler as halving
    from tests.study.search.test_table_scheduler import _drive, _events
    from tests.study.search.test_table_scheduler import _scheduler as cell_asha

    asha = cell_asha(str(tmp_path / "asha.json"))
    _drive(lambda: asha, _events(2), seed=2, stop_after=15)
    data = pickle.dumps(asha)
    assert pickled_modules(data) == {"study.runtime.shells"}
    back = pickle.loads(data)
    assert type(back) is type(asha) and back.arguments() == asha.arguments() and not back.trial_cell
    back.on_trial_add(None, SimpleNamespace(trial_id="new", config={}))  # its first call reads the state file
    assert rung_values(back) == rung_values(asha) and back.trial_cell == asha.trial_cell

    values = _values()
    first = Loop(halving(tmp_path / "halving.json"), values, seed=3)
    first.run(stop_at=25)
    data = pickle.dumps(first.scheduler)
    assert pickled_modules(data) == {"study.runtime.shells"}
    restored = pickle.loads(data)
    assert restored.arguments() == first.scheduler.arguments()
    restored._load_once()
    assert (
        restored.decisions() == first.scheduler.decisions() and restored.rung_values() == first.scheduler.rung_values()
    )
    assert any(k is not None for kept in restored.decisions().values() for k in kept)  # a rung was decided

"""``search.scheduler`` as one kind per module (trainables/schema/scheduler/): every spec the one-class scheduler
loaded still loads, dumps as it dumped (a resume compares ``spec.yaml`` and ``table.yaml`` as written), and pickles
from before come back as their kind; another kind's key is a note under FIFO and the error it was under a stopping
kind. The dumps and pickles below were written by the one-class ``SchedulerSpec`` this replaced."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from trainables.schema.scheduler import SchedulerSpec, kind_named
from trainables.schema.scheduler.base import _NOTED
from trainables.schema.space import SearchSpec

#: Specs as written → their dump by the one-class SchedulerSpec (``model_dump(mode="json")``).
DUMPED_BEFORE = [
    ({}, {"type": "fifo", "grace_period": 1, "reduction_factor": 3.0}),
    (  # table_glyphs.yaml
        {"type": "fifo", "grace_period": 1, "reduction_factor": 3},
        {"type": "fifo", "grace_period": 1, "reduction_factor": 3.0},
    ),
    (  # table_cub.yaml
        {"type": "fifo", "grace_period": 5, "reduction_factor": 3},
        {"type": "fifo", "grace_period": 5, "reduction_factor": 3.0},
    ),
    (
        {"type": "fifo", "grace_period": 5, "first_rung": 3},
        {"type": "fifo", "grace_period": 5, "reduction_factor": 3.0, "first_rung": 3},
    ),
    ({"type": "asha", "grace_period": 10}, {"type": "asha", "grace_period": 10, "reduction_factor": 3.0}),
    (
        {"type": "asha", "grace_period": 2, "reduction_factor": 2, "first_rung": 1, "hedge": 0},
        {"type": "asha", "grace_period": 2, "reduction_factor": 2.0},
    ),
    (
        {"type": "halving", "first_rung": 2, "hedge": 1},
        {"type": "halving", "grace_period": 1, "reduction_factor": 3.0, "first_rung": 2, "hedge": 1},
    ),
    (
        {"type": "halving", "grace_period": 1, "reduction_factor": 2},
        {"type": "halving", "grace_period": 1, "reduction_factor": 2.0, "first_rung": 1, "hedge": 0},
    ),
]


@pytest.mark.parametrize(("written", "dumped"), DUMPED_BEFORE)
def test_a_spec_dumps_as_the_one_class_did_and_loads_back(written: dict, dumped: dict) -> None:
    spec = SearchSpec(scheduler=written).scheduler
    assert spec.model_dump(mode="json") == dumped
    assert list(spec.model_dump(mode="json")) == list(dumped)  # spec.yaml's key order too
    assert SearchSpec(scheduler=dumped).scheduler == spec
    assert type(spec) is kind_named(written.get("type", "fifo"))


def test_the_default_is_fifo_and_a_spec_without_type_is_fifo() -> None:
    assert SchedulerSpec().model_dump(mode="json") == DUMPED_BEFORE[0][1]  # what an old table.yaml held implicitly
    assert SearchSpec().scheduler == SearchSpec(scheduler={"grace_period": 1}).scheduler == SchedulerSpec()
    assert not SchedulerSpec().stops_early and SchedulerSpec(type="asha").stops_early


def test_fifo_keeps_a_stopping_kinds_key_with_one_note_printed_once(capsys) -> None:
    _NOTED.clear()
    for _ in range(3):
        fifo = SearchSpec(scheduler={"type": "fifo", "grace_period": 5, "first_rung": 4}).scheduler
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "grace_period 5, first_rung 4" in err[0] and err[0].startswith("note: ")
    assert fifo.kept == {"grace_period": 5, "first_rung": 4}
    # --set search.scheduler.type=asha on the dumped spec: the kept key is asha's again (the halving one refused).
    switched = {**fifo.model_dump(mode="json"), "type": "halving", "grace_period": 1}
    assert SearchSpec(scheduler=switched).scheduler.first_rung == 4  # type: ignore[attr-defined]
    # The bill's suggestion reads the kept keys, its first rung below the epochs.
    assert fifo.cheaper(10, 8) == SchedulerSpec(type="halving", first_rung=4)
    assert fifo.cheaper(3, 8) == SchedulerSpec(type="halving", first_rung=2) and fifo.cheaper(3, 1) is None
    _NOTED.clear()
    SearchSpec(scheduler={"type": "fifo", "grace_period": 1, "reduction_factor": 3})  # defaults: no note
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ({"type": "asha", "hedge": 2}, "scheduler.hedge applies to halving only, not to 'asha'"),
        ({"type": "halving", "grace_period": 2}, "scheduler.grace_period applies to asha only, not to 'halving'"),
        ({"type": "median"}, "type must be one of asha, fifo, halving"),
        ({"type": "fifo", "grace_period": 0}, "greater than or equal to 1"),
        ({"type": "fifo", "patience": 3}, "Extra inputs are not permitted"),
    ],
)
def test_what_the_one_class_refused_is_still_refused(written: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SearchSpec(scheduler=written)


#: ``pickle.dumps(SchedulerSpec(**keys), protocol=4)`` by the one-class SchedulerSpec (Ray's pickled live view holds
#: the plan, and with it the spec).
OLD_PICKLES = {
    "asha": (
        b"\x80\x04\x95\xea\x00\x00\x00\x00\x00\x00\x00\x8c\x17trainables.schema.space\x94\x8c\rSchedulerSpec\x94"
        b"\x93\x94)\x81\x94}\x94(\x8c\x08__dict__\x94}\x94(\x8c\x04type\x94\x8c\x04asha\x94\x8c\x0cgrace_period\x94"
        b"K\x02\x8c\x10reduction_factor\x94G@\x00\x00\x00\x00\x00\x00\x00\x8c\nfirst_rung\x94K\x01\x8c\x05hedge\x94K"
        b"\x00u\x8c\x12__pydantic_extra__\x94N\x8c\x17__pydantic_fields_set__\x94\x8f\x94(h\nh\th\x07\x90\x8c\x14"
        b"__pydantic_private__\x94Nub."
    ),
    "halving": (
        b"\x80\x04\x95\xed\x00\x00\x00\x00\x00\x00\x00\x8c\x17trainables.schema.space\x94\x8c\rSchedulerSpec\x94"
        b"\x93\x94)\x81\x94}\x94(\x8c\x08__dict__\x94}\x94(\x8c\x04type\x94\x8c\x07halving\x94\x8c\x0cgrace_period"
        b"\x94K\x01\x8c\x10reduction_factor\x94G@\x08\x00\x00\x00\x00\x00\x00\x8c\nfirst_rung\x94K\x02\x8c\x05hedge"
        b"\x94K\x01u\x8c\x12__pydantic_extra__\x94N\x8c\x17__pydantic_fields_set__\x94\x8f\x94(h\x0bh\x0ch\x07\x90"
        b"\x8c\x14__pydantic_private__\x94Nub."
    ),
    "fifo": (
        b"\x80\x04\x95\xea\x00\x00\x00\x00\x00\x00\x00\x8c\x17trainables.schema.space\x94\x8c\rSchedulerSpec\x94"
        b"\x93\x94)\x81\x94}\x94(\x8c\x08__dict__\x94}\x94(\x8c\x04type\x94\x8c\x04fifo\x94\x8c\x0cgrace_period\x94"
        b"K\x05\x8c\x10reduction_factor\x94G@\x08\x00\x00\x00\x00\x00\x00\x8c\nfirst_rung\x94K\x03\x8c\x05hedge\x94K"
        b"\x00u\x8c\x12__pydantic_extra__\x94N\x8c\x17__pydantic_fields_set__\x94\x8f\x94(h\th\x0bh\x07\x90\x8c\x14"
        b"__pydantic_private__\x94Nub."
    ),
}


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("asha", {"type": "asha", "grace_period": 2, "reduction_factor": 2}),
        ("halving", {"type": "halving", "first_rung": 2, "hedge": 1}),
        ("fifo", {"type": "fifo", "grace_period": 5, "first_rung": 3}),
    ],
)
def test_a_spec_pickled_by_the_one_class_comes_back_as_its_kind(name: str, keys: dict) -> None:
    spec = pickle.loads(OLD_PICKLES[name])
    assert type(spec) is kind_named(name) and spec == SchedulerSpec(**keys)
    assert pickle.loads(pickle.dumps(spec)) == spec  # and pickles again under its kind's class
    assert spec.model_dump(mode="json") == SchedulerSpec(**keys).model_dump(mode="json")

"""The contract every registered loss family keeps, checked for each one (no hand-kept family list)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal

import annotated_types as at
import pytest
import torch

from study.intake.spec_reader import parse_spec
from study.intake.validation import family_params
from trainables.families.base import Batch
from trainables.families.registry import FAMILY_NAMES, get_family, get_rules
from trainables.families.rules import FamilyRules, Unbounded
from trainables.loop import TrialRun
from trainables.loop.diagnostics import MinedNegatives
from trainables.loop.member import Member
from trainables.schema.errors import SpecError

#: Families whose loss mines pairs with a pytorch-metric-learning miner (the loop must see what they mine).
_MINER_CLASSES = ("miner", "disc_miner")


def _trial(name: str) -> TrialRun:
    return TrialRun.build(
        parse_spec(
            {
                "name": "contract",
                "family": name,
                "validation": {"kind": "none"},
                "dataset": {"name": "digits", "noise": {"kind": "uniform", "ratio": 0.2, "seed": 0}},
                "train": {"epochs": 1, "classes_per_batch": 4, "samples_per_class": 4, "batches_per_epoch": 2},
            }
        )
    )


def _batch(member: Member) -> tuple[torch.Tensor, Batch]:
    """A real batch from the member's own loader, embedded by its own forward pass (what a family sees)."""
    inputs, labels, indices = next(iter(member._train_loader()))
    if member.family.num_views > 1:
        inputs = inputs.transpose(0, 1).flatten(0, 1)
    return member._forward(inputs), Batch(inputs, labels, indices)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_registry_key_is_the_family_name_and_its_defaults_validate(name):
    cls = get_family(name)
    assert cls.name == name
    defaults = cls.Params()
    assert family_params(name, {}) == defaults and dataclasses.is_dataclass(defaults)
    assert cls.param_names() == tuple(f.name for f in dataclasses.fields(defaults))


#: What the spec layer reads from a family: all of it must come from the torch-free rules.
_RULE_ATTRIBUTES = ("name", "Params", "metric_names", "check_spec", "check_model", "parse_params", "param_names")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_the_family_adds_no_rule_to_its_torch_free_rules(name):
    """Validation reads ``get_rules``; a rule or metric declared on the torch class only would go unchecked."""
    rules, family = get_rules(name), get_family(name)
    assert issubclass(rules, FamilyRules) and issubclass(family, rules)
    for attr in _RULE_ATTRIBUTES:
        mine, theirs = getattr(family, attr), getattr(rules, attr)
        assert getattr(mine, "__func__", mine) is getattr(theirs, "__func__", theirs), attr


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def _constraints(tp: Any) -> tuple[list[Any], list[Unbounded]]:
    """The annotated-types bounds and the :class:`Unbounded` markers on one field's annotation."""
    if typing.get_origin(tp) is not Annotated:
        return [], []
    bounds: list[Any] = []
    for m in tp.__metadata__:
        bounds += [c for c in getattr(m, "metadata", [m]) if isinstance(c, (at.Gt, at.Ge, at.Lt, at.Le))]
    return bounds, [m for m in tp.__metadata__ if isinstance(m, Unbounded)]


def _fields(name: str) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(get_rules(name).Params, include_extras=True)
    return [(f.name, _unwrap_optional(hints[f.name])) for f in dataclasses.fields(get_rules(name).Params)]


def _outside(bound: Any, kind: type) -> Any:
    """A value just outside one bound (of the field's type)."""
    step = 1 if kind is int else 0.5
    if isinstance(bound, at.Gt):
        return bound.gt
    if isinstance(bound, at.Ge):
        return bound.ge - step
    if isinstance(bound, at.Lt):
        return bound.lt
    return bound.le + step


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_every_params_field_is_bounded_or_says_why_not(name):
    """Numbers carry their domain (``Positive``, ``Field(ge=...)``) or an :class:`Unbounded` reason; choices are
    ``Literal`` or ``bool``."""
    for field, tp in _fields(name):
        if typing.get_origin(tp) is Literal or tp is bool:
            continue
        bounds, marks = _constraints(tp)
        assert bounds or (marks and all(m.why.strip() for m in marks)), f"{name}: params.{field} is unbounded"


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_an_out_of_bounds_param_is_one_line_naming_it_before_anything_starts(name):
    """Each bound of each field, at validation: a one-line ``SpecError`` naming ``params.<field>``."""
    checked = 0
    for field, tp in _fields(name):
        bounds, _ = _constraints(tp)
        kind = typing.get_args(tp)[0] if bounds else None
        for bound in bounds:
            raw = {"name": "bounds", "family": name, "params": {field: _outside(bound, kind)}}
            with pytest.raises(SpecError) as err:
                parse_spec(raw)
            msg = str(err.value)
            assert "\n" not in msg and f"params.{field}" in msg, msg
            checked += 1
    assert checked


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_a_degenerate_batch_gives_finite_attached_terms(name):
    """One class in the whole batch: nothing to contrast; every term stays finite and attached to the graph."""
    member = _trial(name).member
    embeddings, batch = _batch(member)
    one_class = Batch(batch.inputs, torch.zeros_like(batch.labels), batch.indices)
    terms = member.family.compute_loss(embeddings, one_class)
    assert terms and all(torch.isfinite(t).all() for t in terms.values())
    total = torch.stack(list(terms.values())).sum()
    assert total.requires_grad
    total.backward()


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_state_round_trips_and_mining_is_visible_to_the_loop(name, tmp_path):
    trial = _trial(name)
    trial.run_epoch()
    trial.save(tmp_path)
    fresh = _trial(name)
    fresh.restore(tmp_path)
    member = trial.member
    for key, value in member.family.state_dict().items():  # extra state (torch's hook) included
        torch.testing.assert_close(fresh.member.family.state_dict()[key], value)
    assert fresh.epoch == 1
    has_miner = any(isinstance(getattr(member.family, a, None), torch.nn.Module) for a in _MINER_CLASSES)
    assert bool(MinedNegatives(member.family).miners) == has_miner
    if has_miner:  # what a real batch mined reaches the loop's diagnostics
        embeddings, batch = _batch(member)
        member.family.compute_loss(embeddings, batch)
        assert member.mined is not None and member.mined.pop() is not None

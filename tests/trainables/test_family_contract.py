"""The contract every registered loss family keeps, checked for each one (no hand-kept family list)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from study.loading import parse_spec
from study.validation import family_params
from trainables.base import Batch
from trainables.diagnostics import MinedNegatives
from trainables.loop import TrialRun
from trainables.loop.member import Member
from trainables.registry import FAMILY_NAMES, get_family

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

"""SPL (Kumar et al. 2010) on the MS loss: the 0/1 w-step against a loop reference, the schedule, the params."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from study.intake.spec_reader import parse_spec
from trainables.families.base import Batch, FamilyContext
from trainables.families.registry import get_family
from trainables.families.spl.loss import SPLFamily, SPLParams
from trainables.schema.errors import SpecError


def _data(seed: int = 0, classes: int = 5, per_class: int = 6, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(classes).repeat_interleave(per_class)
    centers = torch.randn(classes, d, generator=g)
    emb = F.normalize(centers[labels] + 0.8 * torch.randn(labels.numel(), d, generator=g), dim=1)
    labels[::7] = (labels[::7] + 1) % classes  # some mislabeled
    return emb, labels


def _ctx(labels: torch.Tensor) -> FamilyContext:
    return FamilyContext(
        num_train=labels.numel(),
        num_classes=int(labels.unique().numel()),
        train_labels=labels,
        embedding_dim=8,
        device=torch.device("cpu"),
        seed=0,
    )


def _loop_losses(emb: torch.Tensor, labels: torch.Tensor, alpha=2.0, beta=50.0, base=1.0) -> list[float]:
    """ξ⁺ + ξ⁻ of Eq. 3 for every sample, one Python loop per sample and pair."""
    sim = (emb @ emb.T).double().tolist()
    n, out = len(sim), []
    for a in range(n):
        pos = sum(math.exp(-alpha * (sim[a][j] - base)) for j in range(n) if j != a and labels[j] == labels[a])
        neg = sum(math.exp(beta * (sim[a][j] - base)) for j in range(n) if labels[j] != labels[a])
        out.append(math.log1p(pos) / alpha + math.log1p(neg) / beta)
    return out


@pytest.mark.parametrize(
    ("scale", "lam"), [("absolute", 0.3), ("absolute", 0.7), ("relative", 1.0), ("relative", 0.97)]
)
def test_weights_are_the_hard_threshold_of_a_loop_reference(scale, lam):
    emb, labels = _data()
    if scale == "absolute":  # a quantile of the loop reference's losses, in loss units
        lam = sorted(_loop_losses(emb, labels))[int(lam * labels.numel())] + 1e-6
    fam = SPLFamily(SPLParams(lambda0=lam, lambda_max=5.0, lambda_scale=scale), _ctx(labels))
    metrics = fam.on_epoch_end(1, lambda: (emb, torch.arange(labels.numel())))
    losses = _loop_losses(emb, labels)
    threshold = lam * sum(losses) / len(losses) if scale == "relative" else lam
    expected = [1.0 if x <= threshold else 0.0 for x in losses]
    assert fam.weights.tolist() == expected
    assert 0 < sum(expected) < len(expected)  # the threshold splits this data
    assert metrics["lambda"] == pytest.approx(lam)
    assert metrics["bspml/lambda_absolute"] == pytest.approx(threshold, rel=1e-5)
    assert metrics["excluded_share"] == pytest.approx(1 - sum(expected) / len(expected))


def test_the_age_grows_and_caps_and_more_samples_join():
    emb, labels = _data(1)
    fam = SPLFamily(SPLParams(lambda0=0.9, lambda_growth=1.1, lambda_max=1.05), _ctx(labels))
    seen, kept = [], []
    for epoch in range(1, 4):
        seen.append(fam.on_epoch_end(epoch, lambda: (emb, torch.arange(labels.numel())))["lambda"])
        kept.append(float(fam.weights.sum()))
    assert seen == pytest.approx([0.9, 0.99, 1.05])
    assert kept[0] <= kept[1] <= kept[2] and kept[0] < kept[2]


def test_excluded_samples_leave_the_theta_step_and_the_family_is_registered():
    assert get_family("spl") is SPLFamily
    emb, labels = _data(2, classes=4, per_class=4)
    fam = SPLFamily(SPLParams(), _ctx(labels))
    idx = torch.arange(labels.numel())
    full = float(fam.compute_loss(emb, Batch(emb, labels, idx))["spl"])
    fam.weights[labels == 0] = 0.0
    assert float(fam.compute_loss(emb, Batch(emb, labels, idx))["spl"]) < full


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"lambda_growth": 0.9}, "lambda_growth"),
        ({"lambda0": 0}, "lambda0"),
        ({"lambda_scale": "log"}, "lambda_scale"),
        ({"mu": 1.0}, "params.mu"),
    ],
)
def test_bad_params_are_one_line_spec_errors(params, needle):
    with pytest.raises(SpecError, match=needle):
        parse_spec({"name": "x", "family": "spl", "params": params})


def test_the_glyphs_search_space_loads():
    from study.intake.spec_reader import load_spec

    spec = load_spec("search_spaces/spl_glyphs.yaml")
    assert spec.family == "spl" and spec.dataset.name == "glyphs"

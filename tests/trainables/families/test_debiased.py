"""The two-view contrastive families against loop references of the thesis' equations and against PML."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses

from study.intake.spec_reader import parse_spec
from trainables.families.debiased.loss import debiased_neg_loss, debiased_pos_loss
from trainables.loop import TrialRun
from trainables.schema.errors import SpecError
from trainables.schema.metric_names import NMI, OBJECTIVE, SPECTRAL_DECAY, on_test

FAMILIES = ["npair", "debiased_neg", "debiased_pos"]


def _two_views(b: int = 8, d: int = 6, seed: int = 0, spread: float = 1.0) -> torch.Tensor:
    """``[x_1..x_b, x'_1..x'_b]``: each second view a perturbed copy of the first."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, d, generator=g, dtype=torch.float64)
    views = torch.cat([x, x + spread * torch.randn(b, d, generator=g, dtype=torch.float64)])
    return F.normalize(views, dim=1)


def _reference(z: torch.Tensor, t: float, tau_plus: float, kind: str) -> float:
    """Mean over anchors, with plain loops: InfoNCE (Eq. 12), L_Neg (Eq. 15-16) or L_Pos (Eq. 22-24)."""
    z = z.numpy()
    n2 = len(z)
    n, tau_minus = n2 - 2, 1.0 - tau_plus
    total = 0.0
    for i in range(n2):
        j = (i + n2 // 2) % n2  # the other view of the same image
        e = {k: math.exp(float(z[i] @ z[k]) / t) for k in range(n2)}
        negatives = [e[k] for k in range(n2) if k not in (i, j)]
        if kind == "npair":
            total += -math.log(e[j] / (e[j] + sum(negatives)))
        elif kind == "debiased_neg":
            g = max((np.mean(negatives) - tau_plus * e[j]) / tau_minus, math.exp(-1 / t))
            total += -math.log(e[j] / (e[j] + n * g))
        else:
            p_emp = (sum(negatives) + e[j] + e[i]) / (n + 2)
            p_neg = np.mean(negatives)
            total += -math.log((p_emp - tau_minus * p_neg) / (p_emp + (n * tau_plus - tau_minus) * p_neg))
    return total / n2


@pytest.mark.parametrize("tau_plus", [0.02, 0.1, 0.3])
@pytest.mark.parametrize("seed", [0, 1])
def test_debiased_losses_match_loop_references(tau_plus, seed):
    z = _two_views(seed=seed)
    for t in (0.5, 0.2):
        assert float(debiased_neg_loss(z, t, tau_plus)) == pytest.approx(
            _reference(z, t, tau_plus, "debiased_neg"), rel=1e-9
        )
        assert float(debiased_pos_loss(z, t, tau_plus)) == pytest.approx(
            _reference(z, t, tau_plus, "debiased_pos"), rel=1e-9
        )


def test_l_neg_without_false_negatives_is_infonce_as_pml_computes_it():
    z = _two_views(b=12, seed=3)
    ids = torch.arange(12).repeat(2)
    pml = float(losses.NTXentLoss(temperature=0.3)(z, ids))
    assert pml == pytest.approx(_reference(z, 0.3, 0.0, "npair"), rel=1e-9)
    assert float(debiased_neg_loss(z, 0.3, 1e-12)) == pytest.approx(pml, rel=1e-9)


def test_l_neg_floor_holds_when_the_debiased_estimate_goes_negative():
    # Views far apart and a large prior: mean_i e^{s(x,u_i)} − τ⁺ e^{s(x,v)} < 0 for some anchors.
    z = _two_views(b=4, seed=0, spread=0.01)
    t, tau_plus = 0.5, 0.9
    assert float(debiased_neg_loss(z, t, tau_plus)) == pytest.approx(
        _reference(z, t, tau_plus, "debiased_neg"), rel=1e-9
    )
    pos = math.exp(1 / t)  # identical views: s(x,v) ≈ 1/t
    floor_only = -math.log(pos / (pos + 6 * math.exp(-1 / t)))  # every anchor at the floor, N = 6
    assert float(debiased_neg_loss(z, t, tau_plus)) == pytest.approx(floor_only, rel=1e-3)


@pytest.mark.parametrize("fn", [debiased_neg_loss, debiased_pos_loss])
def test_small_temperatures_stay_finite_with_finite_gradients(fn):
    z = _two_views(b=16, seed=2).float().requires_grad_()
    loss = fn(z, 0.01, 0.1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
    assert loss.dtype == torch.float32


def _spec(family: str, **params) -> dict:
    return {
        "name": "contrastive_views",
        "family": family,
        "params": params,
        "dataset": {"name": "digits", "noise": {"kind": "uniform", "ratio": 0.2, "seed": 0}},
        "train": {"epochs": 1, "classes_per_batch": 5, "samples_per_class": 4, "batches_per_epoch": 3},
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_an_epoch_on_two_augmented_views_of_digits(family):
    trial = TrialRun.single(parse_spec(_spec(family)))
    inputs, _, _ = next(iter(trial.member._train_loader()))
    assert inputs.shape[1:] == (2, 1, 8, 8) and not torch.equal(inputs[:, 0], inputs[:, 1])  # two different views
    metrics = trial.run_epoch()
    assert math.isfinite(metrics[f"train/loss/{family}"]) and metrics[f"train/loss/{family}"] > 0
    assert 0.0 <= metrics[on_test(OBJECTIVE)] <= 1.0 and 0.0 <= metrics[on_test(NMI)] <= 1.0
    assert metrics[on_test(SPECTRAL_DECAY)] >= 0


@pytest.mark.parametrize(
    ("family", "params", "space", "needle"),
    [
        # Per-value bounds live on the Params fields; the spec layer reaches them at every range end.
        ("debiased_neg", {"tau_plus": 1.0}, {}, r"params.tau_plus: Input should be less than 1 \(got 1.0\)"),
        ("debiased_pos", {"tau_plus": 0.0}, {}, r"params.tau_plus: Input should be greater than 0 \(got 0.0\)"),
        (
            "debiased_pos",
            {},
            {"tau_plus": {"type": "float", "low": 0.05, "high": 1.0}},
            r"search.space: params.tau_plus: Input should be less than 1 \(got 1.0\)",
        ),
        ("npair", {"temperature": 0.0}, {}, r"params.temperature: Input should be greater than 0"),
        ("npair", {"tau_plus": 0.1}, {}, "params.tau_plus"),
    ],
)
def test_bad_params_are_one_line_spec_errors(family, params, space, needle):
    raw = _spec(family, **params)
    if space:
        raw["search"] = {"num_trials": 1, "space": space}
    with pytest.raises(SpecError, match=needle) as error:
        parse_spec(raw)
    assert "\n" not in str(error.value)


def test_two_view_family_on_a_fake_cifar10_tree_gets_simclr_views(tmp_path):
    from harness.fake_data import write_cifar10

    write_cifar10(tmp_path, per_batch=20, n_test=30)
    raw = _spec("debiased_pos")
    raw["dataset"] = {"name": "cifar10", "root": str(tmp_path), "image_size": 32}
    raw["model"] = {"backbone": "resnet18", "embedding_dim": 32}
    raw["train"].update(classes_per_batch=4, samples_per_class=2, batches_per_epoch=2, recall_at=[1], linear_probe=True)
    raw["validation"] = {"kind": "none"}  # a linear probe classifies the training classes: no class-disjoint folds
    trial = TrialRun.build(parse_spec(raw))
    inputs, _, _ = next(iter(trial.member._train_loader()))
    assert inputs.shape[1:] == (2, 3, 32, 32) and not torch.equal(inputs[:, 0], inputs[:, 1])
    metrics = trial.run_epoch()
    assert math.isfinite(metrics["train/loss/debiased_pos"])
    assert (
        0.0 <= metrics["test/acc1"] <= metrics["test/acc5"] <= 1.0
    )  # the thesis' linear probe, on the same 10 classes


def test_linear_probe_is_refused_where_the_test_classes_are_unseen():
    raw = _spec("npair")
    raw["train"]["linear_probe"] = True
    with pytest.raises(SpecError, match="train.linear_probe needs a dataset whose test classes are its training"):
        parse_spec(raw)


def test_a_family_search_checks_each_family_even_where_the_search_shadows_the_fixed_value():
    raw = _spec("npair", tau_plus=1.5)
    raw["search"] = {
        "num_trials": len(FAMILIES),
        "sampler": {"type": "grid"},
        "space": {
            "family": {"type": "categorical", "choices": FAMILIES},
            "tau_plus": {"type": "categorical", "choices": [0.1], "when": {"family": ["debiased_neg", "debiased_pos"]}},
        },
    }
    with pytest.raises(SpecError, match=r"family debiased_neg: params.tau_plus: .*less than 1 \(got 1.5\)"):
        parse_spec(raw)
    raw["params"]["tau_plus"] = 0.1
    raw["search"]["space"]["tau_plus"]["choices"] = [0.1, 1.0]
    with pytest.raises(SpecError, match=r"params.tau_plus: .*\(got 1.0\)"):
        parse_spec(raw)


# ------------------------------------------------------------------------------ HCL (Robinson et al., ICLR 2021)


def _hcl_reference(z: torch.Tensor, t: float, tau_plus: float, beta: float) -> float:
    """HCL (Robinson et al. Eq. 5, the ``hard`` estimator) with plain loops: w_i = e^{β s_i} / mean_j e^{β s_j}."""
    z = z.numpy()
    n2 = len(z)
    n = n2 - 2
    total = 0.0
    for i in range(n2):
        j = (i + n2 // 2) % n2
        pos = math.exp(float(z[i] @ z[j]) / t)
        sims = [float(z[i] @ z[k]) / t for k in range(n2) if k not in (i, j)]
        weights = [math.exp(beta * s) for s in sims]
        mean_w = sum(weights) / n
        reweighted = sum(w / mean_w * math.exp(s) for w, s in zip(weights, sims))
        n_g = max((reweighted - tau_plus * n * pos) / (1 - tau_plus), n * math.exp(-1 / t))
        total += -math.log(pos / (pos + n_g))
    return total / n2


def _hcl_official(z: torch.Tensor, t: float, tau_plus: float, beta: float) -> float:
    """The official ``criterion`` of github.com/joshr17/HCL ``image/main.py`` (estimator ``hard``), transcribed."""
    b = len(z) // 2
    out_1, out_2 = z[:b], z[b:]
    out = torch.cat([out_1, out_2], dim=0)
    neg = torch.exp(torch.mm(out, out.t().contiguous()) / t)
    mask = torch.ones((b, 2 * b), dtype=torch.bool)
    for i in range(b):
        mask[i, i] = 0
        mask[i, i + b] = 0
    mask = torch.cat((mask, mask), 0)
    neg = neg.masked_select(mask).view(2 * b, -1)
    pos = torch.exp(torch.sum(out_1 * out_2, dim=-1) / t)
    pos = torch.cat([pos, pos], dim=0)
    n = b * 2 - 2
    imp = (beta * neg.log()).exp()
    reweight_neg = (imp * neg).sum(dim=-1) / imp.mean(dim=-1)
    ng = (-tau_plus * n * pos + reweight_neg) / (1 - tau_plus)
    ng = torch.clamp(ng, min=n * np.e ** (-1 / t))
    return float((-torch.log(pos / (pos + ng))).mean())


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("tau_plus", [0.02, 0.1, 0.3])
def test_hcl_matches_a_loop_reference_and_the_official_code(beta, tau_plus):
    from trainables.families.debiased.loss import hcl_loss

    for seed, t in ((0, 0.5), (1, 0.2)):
        z = _two_views(seed=seed)
        reference = _hcl_reference(z, t, tau_plus, beta)
        assert float(hcl_loss(z, t, tau_plus, beta)) == pytest.approx(reference, rel=1e-9)
        assert _hcl_official(z, t, tau_plus, beta) == pytest.approx(reference, rel=1e-9)


@pytest.mark.parametrize("tau_plus", [0.05, 0.1, 0.9])
def test_hcl_at_beta_zero_is_l_neg(tau_plus):
    from trainables.families.debiased.loss import hcl_loss

    for seed, spread in ((0, 1.0), (2, 0.01)):  # spread 0.01 with τ⁺ 0.9 puts anchors on the floor
        z = _two_views(b=10, seed=seed, spread=spread)
        assert float(hcl_loss(z, 0.4, tau_plus, 0.0)) == pytest.approx(
            float(debiased_neg_loss(z, 0.4, tau_plus)), rel=1e-12
        )


def test_hcl_weights_hard_negatives_up_and_stays_finite_at_small_temperatures():
    from trainables.families.debiased.loss import hcl_loss

    z = _two_views(b=16, seed=4)
    # β > 0 moves weight to the negatives most similar to the anchor: the reweighted negative term grows.
    assert float(hcl_loss(z, 0.5, 0.1, 2.0)) > float(hcl_loss(z, 0.5, 0.1, 0.0))
    zf = z.float().requires_grad_()
    loss = hcl_loss(zf, 0.01, 0.1, 5.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(zf.grad).all() and zf.grad.abs().sum() > 0
    with pytest.raises(SpecError, match=r"params.beta: Input should be greater than or equal to 0"):
        parse_spec(_spec("hcl", beta=-1.0))


def test_hcl_family_trains_an_epoch_on_digits():
    trial = TrialRun.single(parse_spec(_spec("hcl", beta=1.0)))
    metrics = trial.run_epoch()
    assert math.isfinite(metrics["train/loss/hcl"]) and metrics["train/loss/hcl"] > 0


def _l_pos_without_self_term(z: torch.Tensor, t: float, tau_plus: float) -> float:
    """Eq. 22-24 with Eq. 23's P_emp over the N negatives and the positive only (no anchor term), plain loops."""
    z = z.numpy()
    n2 = len(z)
    n, tau_minus = n2 - 2, 1.0 - tau_plus
    total = 0.0
    for i in range(n2):
        j = (i + n2 // 2) % n2
        negatives = [math.exp(float(z[i] @ z[k]) / t) for k in range(n2) if k not in (i, j)]
        positive = math.exp(float(z[i] @ z[j]) / t)
        p_emp = (sum(negatives) + positive) / (n + 1)
        p_neg = sum(negatives) / n
        total += -math.log((p_emp - tau_minus * p_neg) / (p_emp + (n * tau_plus - tau_minus) * p_neg))
    return total / n2


@pytest.mark.parametrize("tau_plus", [0.03, 0.1, 0.3])
def test_l_pos_without_self_term_matches_a_loop_reference(tau_plus):
    z = _two_views(seed=2, spread=0.3)
    for t in (0.5, 0.2):
        ours = float(debiased_pos_loss(z, t, tau_plus, self_term=False))
        assert ours == pytest.approx(_l_pos_without_self_term(z, t, tau_plus), rel=1e-9)
        assert ours != pytest.approx(float(debiased_pos_loss(z, t, tau_plus)), rel=1e-3)  # the term matters


@pytest.mark.parametrize("b", [4, 8])
def test_l_pos_without_self_term_at_tau_plus_one_over_n_plus_one_is_infonce(b):
    z = _two_views(b=b, seed=3)
    n = 2 * b - 2
    for t in (0.5, 0.1):
        ours = float(debiased_pos_loss(z, t, 1.0 / (n + 1), self_term=False))
        assert ours == pytest.approx(_reference(z, t, 0.1, "npair"), rel=1e-9)
        pml = losses.NTXentLoss(temperature=t)(z.float(), torch.arange(b).repeat(2))
        assert ours == pytest.approx(float(pml), rel=1e-5)


def test_self_term_reaches_the_losses_from_the_spec():
    from study.intake.validation import family_params
    from trainables.families.base import FamilyContext
    from trainables.families.debiased.loss import DebiasedPosFamily
    from trainables.families.kl_contrastive.loss import KLContrastiveFamily

    assert parse_spec({"name": "s", "family": "debiased_pos", "params": {"self_term": False}}).params == {
        "self_term": False
    }
    with pytest.raises(SpecError, match="self_term"):  # L_Neg has no self term
        parse_spec({"name": "s", "family": "debiased_neg", "params": {"self_term": False}})
    z = _two_views(b=6, seed=4)
    labels = torch.arange(6).repeat(2)
    ctx = FamilyContext(
        num_train=12, num_classes=6, train_labels=labels, embedding_dim=6, device=torch.device("cpu"), seed=0
    )
    pos = DebiasedPosFamily(family_params("debiased_pos", {"self_term": False}), ctx)
    got = float(pos.compute_loss(z, None)["debiased_pos"])  # type: ignore[arg-type]
    assert got == pytest.approx(_l_pos_without_self_term(z, 0.5, 0.1), rel=1e-9)
    kl = KLContrastiveFamily(family_params("kl_contrastive", {"self_term": False}), ctx)
    assert float(kl.contrastive(z)) == pytest.approx(got, rel=1e-9)

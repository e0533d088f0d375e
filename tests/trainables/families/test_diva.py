"""DiVA's pieces against small references: heads, triplet rules, distance weights, DaNCE, decorrelation, resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from study.intake.spec_reader import parse_spec
from trainables.families.diva.loss import (
    DiVAParams,
    dance_loss,
    decorrelation,
    distance_weighted_sample,
    head_slices,
    intra_triplets,
    log_inverse_sphere_density,
    shared_triplets,
)
from trainables.loop import TrialRun
from trainables.schema.errors import SpecError
from trainables.schema.metric_names import OBJECTIVE, on_test


def _unit(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)


def test_inverse_density_is_wu_et_al_eq_1():
    d, dim = torch.tensor([0.3, 0.8, 1.2, 1.9], dtype=torch.float64), 16
    clipped = np.clip(d.numpy(), 0.5, None)
    q = clipped ** (dim - 2) * (1 - clipped**2 / 4) ** ((dim - 3) / 2)
    np.testing.assert_allclose(log_inverse_sphere_density(d, dim, cutoff=0.5).numpy(), -np.log(q), rtol=1e-10)


def test_distance_weighted_sampling_follows_inverse_density_and_its_cutoffs():
    torch.manual_seed(0)
    distances = torch.tensor([[0.0, 0.9, 1.2, 1.5]], dtype=torch.float64).repeat(20000, 1)
    candidates = torch.tensor([[False, True, True, True]]).repeat(20000, 1)
    index, valid = distance_weighted_sample(distances, candidates, dim=8, cutoff=0.5, nonzero_loss_cutoff=1.4)
    assert valid.all() and not (index == 0).any() and not (index == 3).any()  # not a candidate / too far
    w = torch.exp(log_inverse_sphere_density(torch.tensor([0.9, 1.2], dtype=torch.float64), 8, 0.5))
    expected = float(w[0] / w.sum())
    assert float((index == 1).double().mean()) == pytest.approx(expected, abs=0.015)
    # Only far candidates: uniform among them; no candidate at all: invalid.
    index, valid = distance_weighted_sample(
        torch.tensor([[0.0, 1.6, 1.7], [0.0, 1.0, 1.0]]),
        torch.tensor([[False, True, True], [False, False, False]]),
        dim=8,
        cutoff=0.5,
        nonzero_loss_cutoff=1.4,
    )
    assert valid.tolist() == [True, False] and index[0] in (1, 2)


def test_shared_and_intra_triplets_obey_their_label_rules():
    torch.manual_seed(1)
    labels = torch.arange(5).repeat_interleave(4)
    x = _unit(20, 8).float()
    a, p, n = shared_triplets(x, labels, DiVAParams())
    assert len(a) == 20  # every anchor finds a triplet of three classes
    assert ((labels[a] != labels[p]) & (labels[p] != labels[n]) & (labels[a] != labels[n])).all()
    a, p, n = intra_triplets(x, labels, DiVAParams())
    assert len(a) == 20
    assert ((labels[a] == labels[p]) & (labels[p] == labels[n])).all()
    assert ((a != p) & (p != n) & (a != n)).all()
    # A class with two samples has no intra-class triplet.
    a, _, _ = intra_triplets(x[:6], torch.tensor([0, 0, 1, 1, 1, 1]), DiVAParams())
    assert sorted(a.tolist()) == [2, 3, 4, 5]


def _dance_reference(q: np.ndarray, k: np.ndarray, queue: np.ndarray, p: DiVAParams) -> float:
    """Loop reference of Eq. 6 with our weights: min(λ, q(d)^{-1} / mean over the near negatives)."""
    dim, total = q.shape[1], 0.0
    for i in range(len(q)):
        sims = queue @ q[i]
        d = np.sqrt(np.clip(2 - 2 * sims, 0, None))
        dc = np.clip(d, p.cutoff, None)
        inv = dc ** (2 - dim) * (1 - dc**2 / 4) ** (-(dim - 3) / 2)
        near = d < p.nonzero_loss_cutoff
        w = np.where(near, inv / inv[near].mean(), 0.0)
        w = np.minimum(w, p.weight_cap)
        logits = np.concatenate([[q[i] @ k[i]], w * sims]) / p.temperature
        total += -logits[0] + math.log(np.exp(logits - logits.max()).sum()) + logits.max()
    return total / len(q)


@pytest.mark.parametrize("cap", [1.0, 3.0])
def test_dance_loss_matches_a_loop_reference(cap):
    q, k, queue = _unit(6, 12, 0), _unit(6, 12, 1), _unit(40, 12, 2)
    p = DiVAParams(temperature=0.1, weight_cap=cap)
    assert float(dance_loss(q, k, queue, p)) == pytest.approx(
        _dance_reference(q.numpy(), k.numpy(), queue.numpy(), p), rel=1e-9
    )


def test_dance_with_equal_weights_is_infonce():
    # Every negative at the same distance (orthogonal to the query): all weights 1, plain InfoNCE.
    q = torch.eye(8, dtype=torch.float64)[:2]
    queue = torch.eye(8, dtype=torch.float64)[2:]
    k = F.normalize(q + 0.5 * torch.eye(8, dtype=torch.float64)[2:4], dim=1)
    p = DiVAParams(temperature=0.2, nonzero_loss_cutoff=1.5)
    logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.T], 1) / 0.2
    assert float(dance_loss(q, k, queue, p)) == pytest.approx(
        float(F.cross_entropy(logits, torch.zeros(2, dtype=torch.long)))
    )


def test_decorrelation_trains_psi_to_correlate_and_the_heads_to_decorrelate():
    torch.manual_seed(0)
    a, b = _unit(32, 8, 0).float().requires_grad_(), _unit(32, 8, 1).float().requires_grad_()
    psi = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    (-decorrelation(a, b, psi)).backward()  # Eq. 7's −ρ·c with ρ = 1
    with torch.no_grad():
        before = float(decorrelation(a, b, psi))
        # A gradient step on the heads alone lowers c: they received the reversed gradient.
        assert float(decorrelation(a - 0.5 * a.grad, b - 0.5 * b.grad, psi)) < before
        # A gradient step on ψ alone raises c: ψ descends −c.
        for w in psi.parameters():
            w -= 0.5 * w.grad
        assert float(decorrelation(a, b, psi)) > before


def test_head_slices_cover_the_embedding():
    assert head_slices(64) == [slice(0, 16), slice(16, 32), slice(32, 48), slice(48, 64)]
    sizes = [s.stop - s.start for s in head_slices(18)]
    assert sum(sizes) == 18 and max(sizes) - min(sizes) <= 1


def _spec(**params) -> dict:
    return {
        "name": "diva",
        "family": "diva",
        "params": {"queue_size": 64, "rho": 5.0, **params},
        "dataset": {"name": "digits", "noise": {"kind": "uniform", "ratio": 0.2, "seed": 0}},
        "train": {"epochs": 2, "classes_per_batch": 5, "samples_per_class": 4, "batches_per_epoch": 4},
    }


def test_diva_trains_evaluates_on_renormalised_heads_and_resumes(tmp_path):
    first = TrialRun.single(parse_spec(_spec()))
    metrics = first.run_epoch()
    member = first.member  # the family's queue, heads and optimiser groups are the member's
    assert {f"train/loss/diva_{t}" for t in ("disc", "shared", "intra", "dance", "decorrelation")} <= set(metrics)
    assert metrics["train/loss/diva_decorrelation"] < 0 and 0 <= metrics[on_test(OBJECTIVE)] <= 1
    assert int(member.family.queue_filled) == 64  # 4 batches × 20 keys, capped at the queue size
    emb = member.embed(member.data.test)
    heads = [emb[:, s] for s in member.family.slices]
    norms = torch.stack([h.norm(dim=1) for h in heads])
    torch.testing.assert_close(norms, torch.full_like(norms, 0.5))  # four unit heads, concatenated, re-normalised
    # Only β and ψ are trained by the family; the key encoder is a frozen running average.
    assert not any(p.requires_grad for p in member.family.key_encoder.parameters())
    trained = {id(p) for g in member.optimizer.param_groups[1:] for p in g["params"]}
    assert trained == {id(p) for p in [*member.family.disc.parameters(), *member.family.psi.parameters()]}
    first.save(tmp_path)
    expected = first.run_epoch()
    resumed = TrialRun.single(parse_spec(_spec()))
    resumed.restore(tmp_path)
    again = resumed.run_epoch()
    assert again["train/loss"] == pytest.approx(expected["train/loss"], rel=1e-5)
    for a, b in zip(member.family.state_dict().values(), resumed.member.family.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_diva_spec_errors_are_one_line():
    raw = _spec()
    raw["model"] = {"embedding_dim": 8}
    with pytest.raises(SpecError, match="model.embedding_dim >= 16 must hold for DiVA"):
        parse_spec(raw)
    with pytest.raises(SpecError, match=r"params.temperature: Input should be greater than 0"):
        parse_spec(_spec(temperature=0.0))


# ----------------------------------------------------------------- the margin-loss divisor (official code vs PML)


def _official_margin(d_ap: torch.Tensor, d_an: torch.Tensor, beta: float = 1.2, margin: float = 0.2) -> float:
    """The reduction of the official ``criteria/margin.py`` / ``shared_margin.py``, transcribed."""
    pos_loss = F.relu(d_ap - beta + margin)
    neg_loss = F.relu(beta - d_an + margin)
    pair_count = torch.sum((pos_loss > 0.0) + (neg_loss > 0.0)).to(torch.float)  # bool + bool: a logical OR
    loss = torch.sum(pos_loss + neg_loss)
    return float(loss if pair_count == 0.0 else loss / pair_count)


def _circle(*degrees: float) -> torch.Tensor:
    rad = torch.tensor(degrees, dtype=torch.float64) * math.pi / 180
    return torch.stack([torch.cos(rad), torch.sin(rad)], dim=1)


@pytest.mark.parametrize(
    ("triplets", "per_triplet", "per_term"),
    [
        # Anchor at 0°, points at 90° (d = √2), 60° (d = 1), 180° (d = 2); β = 1.2, γ = 0.2, so a positive is
        # active beyond d = 1.0 and a negative within d = 1.4. (0, 1, 2): both terms, (√2 − 1) + (1.4 − 1) = 0.8142.
        ([(0, 1, 2)] * 4, 0.81421356, 0.40710678),  # 4 triplets, 8 active terms: /4 vs /8
        # + (0, 1, 3): the positive term only, 0.4142; (0, 2, 3): none. Sum 2.0426: /3 triplets vs /5 terms.
        ([(0, 1, 2), (0, 1, 2), (0, 1, 3), (0, 2, 3)], 2.04264069 / 3, 2.04264069 / 5),
    ],
)
def test_margin_divisor_per_triplet_is_the_official_code_per_term_is_pml(triplets, per_triplet, per_term):
    from pytorch_metric_learning import losses

    from trainables.families.diva.loss import DiVAMarginLoss

    points = _circle(0, 90, 60, 180)
    labels = torch.tensor([0, 0, 1, 2])
    a, p, n = (torch.tensor(c) for c in zip(*triplets))
    d = torch.cdist(points, points)
    assert _official_margin(d[a, p], d[a, n]) == pytest.approx(per_triplet, abs=1e-7)
    for divisor, expected in (("per_triplet", per_triplet), ("per_term", per_term)):
        loss = DiVAMarginLoss(margin=0.2, nu=0.0, beta=1.2, divisor=divisor)(points, labels, (a, p, n))
        assert float(loss) == pytest.approx(expected, abs=1e-6)
    pml = losses.MarginLoss(margin=0.2, nu=0.0, beta=1.2)(points, labels, (a, p, n))
    assert float(pml) == pytest.approx(per_term, abs=1e-6)


def test_margin_divisor_is_a_param_used_by_every_margin_term():
    assert DiVAParams().margin_divisor == "per_triplet"
    family = TrialRun.single(parse_spec(_spec(margin_divisor="per_term"))).member.family
    assert family.disc.divisor == family.fixed_margin.divisor == "per_term"
    with pytest.raises(SpecError, match="params.margin_divisor"):
        parse_spec(_spec(margin_divisor="per_pair"))
    # Nothing violated: an attached zero, as PML's.
    from trainables.families.diva.loss import DiVAMarginLoss

    points = _circle(0, 60, 180).requires_grad_()
    loss = DiVAMarginLoss(margin=0.2, nu=0.0, beta=1.2)(
        points, torch.tensor([0, 0, 1]), tuple(torch.tensor([i]) for i in (0, 1, 2))
    )
    assert float(loss.detach()) == 0.0 and loss.requires_grad

"""The baseline families against plain-loop numpy references (hand-written parts) or PML (PML-served parts)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses, miners

from trainables.families.base import Batch, FamilyContext
from trainables.families.contrastive.loss import ContrastiveFamily, ContrastiveParams
from trainables.families.fastap.loss import FastAPFamily, FastAPParams
from trainables.families.margin.loss import MarginalFamily, MarginalParams, MarginFamily, MarginParams
from trainables.families.proxy_anchor.loss import ProxyAnchorFamily, ProxyAnchorParams
from trainables.families.rdml.loss import RDMLFamily, RDMLParams
from trainables.families.snr.loss import SNRFamily, SNRParams
from trainables.families.triplet.loss import (
    FixedSemiHardMiner,
    RandomSemiHardMiner,
    TripletFamily,
    TripletParams,
    TripletSmoothFamily,
    TripletSmoothParams,
)

DTYPES = [torch.float32, torch.float64]


def _ctx(n: int = 16, d: int = 8, classes: int = 4) -> FamilyContext:
    labels = torch.arange(n) % classes
    return FamilyContext(
        num_train=n,
        num_classes=classes,
        train_labels=labels,
        embedding_dim=d,
        device=torch.device("cpu"),
        seed=0,
    )


def _record_mining(family) -> list:
    """The tuples the family's PML miner returns, recorded by a forward hook (as the loop observes them)."""
    out: list = []
    family.miner.register_forward_hook(lambda module, args, tuples: out.append(tuples))
    return out


def _batch(dtype: torch.dtype, seed: int = 0, n: int = 16, d: int = 8, classes: int = 4):
    g = torch.Generator().manual_seed(seed)
    emb = F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=1).requires_grad_(True)
    labels = torch.arange(n) % classes
    return emb, Batch(inputs=emb.detach(), labels=labels, indices=torch.arange(n))


def _tol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-10


def _dist(x: np.ndarray) -> np.ndarray:
    return np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))


def _circle(degrees: list[float]) -> torch.Tensor:
    """Unit vectors at the given angles: chord distance 2·sin(Δ/2) grows with the angle gap (a 1-D line)."""
    rad = torch.tensor(degrees, dtype=torch.float64) * math.pi / 180
    return torch.stack([rad.cos(), rad.sin()], dim=1)


# ------------------------------------------------------------------------------------------- semi-hard rules

# anchor 0° and positive 40° (class 0); negatives (class 1) at 20°, 60°, 90°, 170°.
# d_ap = 0.684; d_an = 0.347, 1.000, 1.414, 1.992; margin 0.4 → d_ap + α = 1.084.
_ANGLES = [0.0, 40.0, 20.0, 60.0, 90.0, 170.0]
_LABELS = torch.tensor([0, 0, 1, 1, 1, 1])


def _triplets_of_anchor0(out):
    a, p, n = (t.tolist() for t in out)
    return [(pp, nn) for aa, pp, nn in zip(a, p, n) if aa == 0]


def test_fixed_semihard_picks_the_closest_negative_farther_than_the_positive():
    out = FixedSemiHardMiner(margin=0.4)(_circle(_ANGLES), _LABELS)
    assert _triplets_of_anchor0(out) == [(1, 3)]  # 60°: the closest of {60°, 90°, 170°}; 20° is closer than p


def test_fixed_semihard_falls_back_to_the_farthest_negative():
    # Positive at 175°: every negative is closer than it, so the farthest negative (170°) is taken.
    angles = [0.0, 175.0, 20.0, 60.0, 90.0, 170.0]
    out = FixedSemiHardMiner(margin=0.4)(_circle(angles), _LABELS)
    assert _triplets_of_anchor0(out) == [(1, 5)]


def test_random_semihard_draws_uniformly_among_negatives_with_positive_loss():
    torch.manual_seed(0)
    miner = RandomSemiHardMiner(margin=0.4)
    picks = [_triplets_of_anchor0(miner(_circle(_ANGLES), _LABELS)) for _ in range(2000)]
    assert all(len(p) == 1 and p[0][0] == 1 for p in picks)
    chosen = np.array([p[0][1] for p in picks])
    assert set(chosen.tolist()) == {2, 3}  # 20° and 60° have d_an < 1.084; 90° and 170° never
    assert abs((chosen == 2).mean() - 0.5) < 0.05


def test_random_semihard_drops_a_pair_without_candidates():
    # margin 0 and every negative farther than the positive: no triplet with positive loss.
    angles = [0.0, 10.0, 60.0, 90.0]
    out = RandomSemiHardMiner(margin=0.0)(_circle(angles), torch.tensor([0, 0, 1, 1]))
    assert _triplets_of_anchor0(out) == []


def _semihard_reference(x: np.ndarray, labels: np.ndarray, margin: float):
    """Loop version of Eq. 28 (candidate sets) and Eq. 29 (+ fallback) per (anchor, positive) pair."""
    d = _dist(x)
    cand, fixed = {}, {}
    for a in range(len(x)):
        for p in range(len(x)):
            if p == a or labels[p] != labels[a]:
                continue
            negs = [n for n in range(len(x)) if labels[n] != labels[a]]
            cand[(a, p)] = {n for n in negs if d[a, n] < d[a, p] + margin}
            farther = [n for n in negs if d[a, n] > d[a, p]]
            fixed[(a, p)] = min(farther, key=lambda n: d[a, n]) if farther else max(negs, key=lambda n: d[a, n])
    return d, cand, fixed


def _triplet_loss_reference(d: np.ndarray, triplets, margin: float, smooth: bool = False) -> float:
    """Mean over triplets with non-zero loss (PML's AvgNonZeroReducer) of [d_ap − d_an + α]_+ or its softplus."""
    values = []
    for a, p, n in triplets:
        v = d[a, p] - d[a, n] + margin
        values.append(math.log1p(math.exp(v)) if smooth else max(v, 0.0))
    nonzero = [v for v in values if v > 0]
    return sum(nonzero) / len(nonzero) if nonzero else 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_triplet_fixed_semihard_matches_loop_reference(dtype):
    emb, batch = _batch(dtype)
    family = TripletFamily(TripletParams(margin=0.2, mining="fixed_semihard"), _ctx())
    mined = _record_mining(family)
    loss = family.compute_loss(emb, batch)["triplet"]
    x = emb.detach().double().numpy()
    d, _, fixed = _semihard_reference(x, batch.labels.numpy(), 0.2)
    triplets = [(a, p, n) for (a, p), n in sorted(fixed.items())]
    got = sorted(zip(*(t.tolist() for t in mined[-1])))
    assert got == triplets
    assert float(loss.detach()) == pytest.approx(
        _triplet_loss_reference(d, triplets, 0.2), rel=_tol(dtype), abs=_tol(dtype)
    )
    loss.backward()
    assert torch.isfinite(emb.grad).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("smooth", [False, True])
def test_triplet_random_semihard_matches_loop_reference(dtype, smooth):
    emb, batch = _batch(dtype, seed=1)
    torch.manual_seed(3)
    cls, params = (
        (TripletSmoothFamily, TripletSmoothParams(margin=0.3, mining="random_semihard"))
        if smooth
        else (TripletFamily, TripletParams(margin=0.3, mining="random_semihard"))
    )
    family = cls(params, _ctx())
    mined = _record_mining(family)
    loss = family.compute_loss(emb, batch)[family.name]
    x = emb.detach().double().numpy()
    d, cand, _ = _semihard_reference(x, batch.labels.numpy(), 0.3)
    triplets = list(zip(*(t.tolist() for t in mined[-1])))
    # One triplet per positive pair that has a candidate, its negative drawn from that pair's candidates.
    assert sorted((a, p) for a, p, _ in triplets) == sorted(k for k, v in cand.items() if v)
    assert all(n in cand[(a, p)] for a, p, n in triplets)
    ref = _triplet_loss_reference(d, triplets, 0.3, smooth=smooth)
    assert float(loss.detach()) == pytest.approx(ref, rel=_tol(dtype), abs=_tol(dtype))


@pytest.mark.parametrize("mining,miner", [("hard", miners.BatchHardMiner()), ("all", None)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_triplet_hard_and_all_equal_pml(mining, miner, dtype):
    emb, batch = _batch(dtype, seed=2)
    got = TripletFamily(TripletParams(margin=0.2, mining=mining), _ctx()).compute_loss(emb, batch)["triplet"]
    tuples = miner(emb, batch.labels) if miner is not None else None
    want = losses.TripletMarginLoss(margin=0.2)(emb, batch.labels, tuples)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=_tol(dtype), abs=_tol(dtype))


# --------------------------------------------------------------------------------------------- pair losses


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("params", [ContrastiveParams(), ContrastiveParams(pos_margin=0.8, neg_margin=0.3)])
def test_contrastive_matches_loop_reference_on_cosine_similarity(dtype, params):
    emb, batch = _batch(dtype)
    loss = ContrastiveFamily(params, _ctx()).compute_loss(emb, batch)["contrastive"]
    x, y = emb.detach().double().numpy(), batch.labels.numpy()
    s = x @ x.T
    pos = [max(params.pos_margin - s[i, j], 0) for i in range(len(x)) for j in range(len(x)) if i != j and y[i] == y[j]]
    neg = [max(s[i, j] - params.neg_margin, 0) for i in range(len(x)) for j in range(len(x)) if y[i] != y[j]]
    ref = sum(v for v in pos) / max(sum(v > 0 for v in pos), 1) + sum(neg) / max(sum(v > 0 for v in neg), 1)
    assert float(loss.detach()) == pytest.approx(ref, rel=_tol(dtype), abs=_tol(dtype))


def _margin_reference(d: np.ndarray, triplets, beta, alpha: float) -> float:
    """Wu et al. Eq. 3 over (a, p, n): Σ [d_ap − β + α]_+ + [β − d_an + α]_+ / #non-zero terms."""
    total, count = 0.0, 0
    for a, p, n in triplets:
        b = beta(a)
        for v in (d[a, p] - b + alpha, b - d[a, n] + alpha):
            if v > 0:
                total, count = total + v, count + 1
    return total / count if count else 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_marginal_matches_loop_reference(dtype):
    emb, batch = _batch(dtype, seed=4)
    torch.manual_seed(0)
    family = MarginalFamily(MarginalParams(), _ctx())
    mined = _record_mining(family)
    loss = family.compute_loss(emb, batch)["marginal"]
    x = emb.detach().double().numpy()
    d, cand, _ = _semihard_reference(x, batch.labels.numpy(), 0.2)
    triplets = list(zip(*(t.tolist() for t in mined[-1])))
    assert all(n in cand[(a, p)] for a, p, n in triplets)  # random semi-hard pairs
    # PML stores a fixed β as a float32 tensor, so float64 runs see float32(1.4).
    ref = _margin_reference(d, triplets, lambda a: float(np.float32(1.4)), 0.2)
    assert float(loss.detach()) == pytest.approx(ref, rel=_tol(dtype), abs=_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_margin_learnable_beta_per_class_matches_loop_reference(dtype):
    emb, batch = _batch(dtype, seed=5)
    torch.manual_seed(0)
    family = MarginFamily(MarginParams(), _ctx()).to(dtype)
    mined = _record_mining(family)
    with torch.no_grad():  # distinct per-class boundaries, to check each anchor uses its own class's β
        family.criterion.beta.copy_(torch.tensor([1.0, 1.1, 1.2, 1.3], dtype=dtype))
    loss = family.compute_loss(emb, batch)["margin"]
    x, y = emb.detach().double().numpy(), batch.labels.numpy()
    triplets = list(zip(*(t.tolist() for t in mined[-1])))
    assert triplets and all(y[a] == y[p] != y[n] for a, p, n in triplets)
    ref = _margin_reference(_dist(x), triplets, lambda a: [1.0, 1.1, 1.2, 1.3][y[a]], 0.2)
    assert float(loss.detach()) == pytest.approx(ref, rel=_tol(dtype), abs=_tol(dtype))
    loss.backward()
    assert family.criterion.beta.grad is not None and family.criterion.beta.grad.abs().sum() > 0


def test_margin_beta_and_proxies_get_their_own_learning_rate():
    margin = MarginFamily(MarginParams(beta_lr=3e-3), _ctx())
    (group,) = margin.param_groups(1e-5)
    assert group["lr"] == 3e-3 and [p.shape for p in group["params"]] == [torch.Size([4])]
    proxy = ProxyAnchorFamily(ProxyAnchorParams(proxy_lr_scale=50.0), _ctx())
    (group,) = proxy.param_groups(1e-4)
    assert group["lr"] == pytest.approx(5e-3) and group["params"][0].shape == (4, 8)
    assert "criterion.proxies" in proxy.state_dict()  # checkpointed with the family


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eta", [0.5, 1.0, 4.0])
def test_rdml_matches_loop_reference(dtype, eta):
    emb, batch = _batch(dtype, seed=6)
    params = RDMLParams(eta=eta)
    terms = RDMLFamily(params, _ctx()).compute_loss(emb, batch)
    x, y = emb.detach().double().numpy(), batch.labels.numpy()
    d2 = _dist(x) ** 2
    pos, neg = [], []
    for i in range(len(x)):
        for j in range(len(x)):
            if i == j:
                continue
            t = 1 if y[i] == y[j] else -1
            h = max(params.margin - t * (params.threshold - d2[i, j]), 0.0)
            (pos if t == 1 else neg).append((1 - math.exp(-eta * h)) / (1 - math.exp(-eta)))
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    assert float(terms["rdml_pos"].detach()) == pytest.approx(np.mean(pos), rel=tol, abs=tol)
    assert float(terms["rdml_neg"].detach()) == pytest.approx(np.mean(neg), rel=tol, abs=tol)


def test_rdml_without_positive_pairs_gives_an_attached_zero():
    emb = F.normalize(torch.randn(4, 3), dim=1).requires_grad_(True)
    batch = Batch(inputs=emb.detach(), labels=torch.arange(4), indices=torch.arange(4))
    terms = RDMLFamily(RDMLParams(), _ctx()).compute_loss(emb, batch)
    assert float(terms["rdml_pos"].detach()) == 0.0
    sum(terms.values()).backward()
    assert emb.grad is not None


# ----------------------------------------------------------------------------------- PML-served families


@pytest.mark.parametrize("dtype", DTYPES)
def test_pml_served_families_equal_pml(dtype):
    emb, batch = _batch(dtype, seed=7)
    got = FastAPFamily(FastAPParams(num_bins=10), _ctx()).compute_loss(emb, batch)["fastap"]
    assert float(got.detach()) == pytest.approx(
        float(losses.FastAPLoss(num_bins=10)(emb, batch.labels).detach()), rel=_tol(dtype)
    )
    got = SNRFamily(SNRParams(), _ctx()).compute_loss(emb, batch)["snr"]
    want = losses.SignalToNoiseRatioContrastiveLoss(pos_margin=0.0, neg_margin=1.0)(emb, batch.labels)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=_tol(dtype))
    family = ProxyAnchorFamily(ProxyAnchorParams(), _ctx()).to(dtype)
    got = family.compute_loss(emb, batch)["proxy_anchor"]
    pml = losses.ProxyAnchorLoss(num_classes=4, embedding_size=8, margin=0.1, alpha=32).to(dtype)
    pml.proxies.data.copy_(family.criterion.proxies.data)
    assert float(got.detach()) == pytest.approx(float(pml(emb, batch.labels).detach()), rel=_tol(dtype))

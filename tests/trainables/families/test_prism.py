"""PRISM (family ``prism``): the selection rule and clean probability against plain-loop references written from
the authors' code (github.com/alibaba-edu/Ranking-based-Instance-Selection, ``ret_benchmark/losses/
memory_contrastive_loss_w_PRISM.py``), the memory's behaviour, the loss against a loop, and a short training run."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from study.intake.spec_reader import parse_spec
from trainables.families.base import Batch, FamilyContext
from trainables.families.prism.loss import PrismFamily, PrismParams, clean_probability, select_clean
from trainables.loop import TrialRun

# ----------------------------------------------------------------------------------- loop references


def _reference_probability(emb, labels, centres, filled):
    """PRISM's per-sample loop: ``exp(c_y·f) / Σ_k exp(c_k·f)``, 1 for a class without a centre."""
    out = []
    for i in range(emb.shape[0]):
        y = int(labels[i])
        if not bool(filled[y]):
            out.append(1.0)
            continue
        e = [math.exp(float(centres[k] @ emb[i])) for k in range(centres.shape[0])]
        out.append(e[y] / sum(e))
    return torch.tensor(out, dtype=torch.float64)


def _reference_select(prob, noise_rate, window, window_size):
    """PRISM's rule with Python lists, step by step as its code reads."""
    c = [float(p) for p in prob]
    n = len(c)
    k = int(noise_rate * n)
    order = sorted(range(n), key=lambda i: c[i])  # Python's sort is stable, as is torch's with stable=True
    to_remove = set(order[:k])
    window = list(window)
    if k > 0:
        last = c[order[k - 1]]
        if not math.isnan(last) and last != 1.0:
            window.append(last)
            window = window[-window_size:]
    if window:
        thr = sum(window) / len(window)
        keep = [x > thr for x in c]
        if not any(keep):
            keep = [i not in to_remove for i in range(n)]
            window = window[-1:]
            thr = c[order[k - 1]]
    else:
        keep = [i not in to_remove for i in range(n)]
        thr = c[order[k - 1]] if k > 0 else 0.0
    return keep, thr, window


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clean_probability_matches_the_loop(dtype):
    g = torch.Generator().manual_seed(0)
    emb = F.normalize(torch.randn(12, 5, generator=g, dtype=dtype), dim=1)
    centres = F.normalize(torch.randn(4, 5, generator=g, dtype=dtype), dim=1)
    centres[3] = 0  # never filled: a zero row, still in the denominator (e^0), as in PRISM
    filled = torch.tensor([True, True, False, False])
    labels = torch.randint(0, 4, (12,), generator=g)
    got = clean_probability(emb, labels, centres, filled)
    torch.testing.assert_close(got.double(), _reference_probability(emb, labels, centres, filled), atol=1e-6, rtol=0)


def test_selection_matches_the_loop_over_a_sequence_of_batches():
    """Many batches in a row, so the sliding window fills, slides past its size, and the fallback fires."""
    g = torch.Generator().manual_seed(1)
    window_ref: list[float] = []
    window: list[float] = []
    for step in range(60):
        prob = torch.rand(16, generator=g, dtype=torch.float64)
        if step % 7 == 3:
            prob = prob * 0.01  # the whole batch below the window's mean: the top-R fallback
        if step % 11 == 5:
            prob[:4] = 1.0  # samples of classes without a centre
        keep_ref, thr_ref, window_ref = _reference_select(prob, 0.25, window_ref, 5)
        keep, thr, window = select_clean(prob, 0.25, window, 5)
        assert keep.tolist() == keep_ref
        assert thr == pytest.approx(thr_ref)
        assert window == pytest.approx(window_ref)
        assert len(window) <= 5


def test_selection_without_candidates_keeps_everyone():
    prob = torch.tensor([0.1, 0.9, 0.5])
    keep, thr, window = select_clean(prob, 0.2, [], 30)  # floor(0.2·3) = 0
    assert keep.all() and thr == 0.0 and window == []


def test_selection_removes_the_lowest_r_share_before_the_window_has_history():
    prob = torch.tensor([0.5, 0.1, 0.9, 0.2, 0.7, 0.3, 0.8, 0.6])
    keep, thr, window = select_clean(prob, 0.25, [], 30)
    # floor(0.25·8) = 2 candidates (0.1, 0.2); the window now holds 0.2, and > 0.2 keeps the other six.
    assert keep.tolist() == [True, False, True, False, True, True, True, True]
    assert thr == pytest.approx(0.2) and window == pytest.approx([0.2])


# -------------------------------------------------------------------------------------------- family


def _family(num_train=32, classes=4, dim=8, **params):
    labels = torch.arange(num_train) % classes
    ctx = FamilyContext(
        num_train=num_train,
        num_classes=classes,
        train_labels=labels,
        embedding_dim=dim,
        device=torch.device("cpu"),
        seed=0,
        noise_rate=0.25,
    )
    return PrismFamily(PrismParams(**params), ctx), labels


def _batch(labels, idx, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = F.normalize(torch.randn(len(idx), dim, generator=g), dim=1).requires_grad_()
    return emb, Batch(torch.zeros(len(idx)), labels[idx], idx)


def test_memory_holds_the_kept_samples_only_and_centres_are_their_class_means():
    fam, labels = _family(memory_size=12)
    assert fam.noise_rate == 0.25  # null noise_rate: the spec's stated rate
    for step in range(5):
        idx = torch.arange(8) + 8 * (step % 4)
        emb, batch = _batch(labels, idx, seed=step)
        before = fam.memory.queue_idx
        fam.compute_loss(emb, batch)
        kept = 8 if step == 0 else 8 - (fam.sample_scores()[idx] < 0.5).sum().item()
        assert (fam.memory.queue_idx - before) % 12 == kept % 12
    feats, mem_labels = fam._memory()
    assert feats.shape[0] == 12 and fam.memory.has_been_filled  # a ring buffer of memory_size
    for c in mem_labels.unique():
        torch.testing.assert_close(fam.centres[c], feats[mem_labels == c].mean(0))


def test_first_batch_selects_nothing_and_later_batches_remove_the_noise_rate_share():
    fam, labels = _family()
    emb, batch = _batch(labels, torch.arange(16))
    terms = fam.compute_loss(emb, batch)
    assert set(terms) == {"prism", "memory"} and float(terms["memory"].detach()) == 0.0  # empty memory
    assert fam.sample_scores()[:16].eq(1).all()  # not scored: the memory was empty
    emb, batch = _batch(labels, torch.arange(16, 32), seed=1)
    fam.compute_loss(emb, batch)
    dropped = (fam.sample_scores()[16:] < 0.5).sum().item()
    assert 1 <= dropped <= 16 - 1  # the window's threshold after one batch: at least floor(0.25·16) = 4 removed
    assert dropped >= 4


def test_loss_matches_a_loop_over_pairs():
    """Batch term: Σ over kept pairs of (1 − s) for positives and (s − margin)+ for negatives, / #kept; memory term:
    the same against the memory, / batch size (PRISM's ``(pos_loss + neg_loss) / n``, up to PML's −margin)."""
    fam, labels = _family(memory_size=64, warm_up=10**6)  # no selection: every sample kept
    emb0, batch0 = _batch(labels, torch.arange(8), seed=3)
    fam.compute_loss(emb0, batch0)
    mem, mem_labels = (t.clone() for t in fam._memory())
    emb, batch = _batch(labels, torch.arange(8, 16), seed=4)
    terms = fam.compute_loss(emb, batch)
    y = batch.labels

    def pair_loss(a, ya, b, yb, skip_self):
        total = 0.0
        for i in range(a.shape[0]):
            for j in range(b.shape[0]):
                if skip_self and i == j:
                    continue
                s = float(a[i] @ b[j])
                total += (1 - s) if ya[i] == yb[j] else max(s - 0.5, 0.0)
        return total

    e = emb.detach()
    assert float(terms["prism"].detach()) == pytest.approx(pair_loss(e, y, e, y, True) / 8, rel=1e-5)
    assert float(terms["memory"].detach()) == pytest.approx(pair_loss(e, y, mem, mem_labels, False) / 8, rel=1e-5)


def test_warm_up_and_memory_start_delay_selection_and_memory():
    fam, labels = _family(memory_start=2, warm_up=3)
    for step in range(3):
        emb, batch = _batch(labels, torch.arange(8) + 8 * step, seed=step)
        terms = fam.compute_loss(emb, batch)
        assert fam.sample_scores().eq(1).all()
        if step < 2:
            assert fam.memory.queue_idx == 0 and float(terms["memory"].detach()) == 0.0


def test_a_short_glyphs_run_reports_prism_metrics_and_noise_auroc():
    spec = parse_spec(
        {
            "name": "prism_smoke",
            "family": "prism",
            "validation": {"kind": "none"},
            "dataset": {"name": "glyphs", "noise": {"kind": "small_cluster", "ratio": 0.25, "seed": 0}},
            "train": {"epochs": 1, "classes_per_batch": 8, "samples_per_class": 4, "batches_per_epoch": 20},
            "params": {"memory_size": 256},
        }
    )
    metrics = TrialRun.build(spec).run_epoch()
    for name in ("prism_threshold", "prism_kept_share", "excluded_share", "noise_auroc", "train/loss/memory"):
        assert name in metrics and math.isfinite(metrics[name]), name
    assert 0.5 < metrics["prism_kept_share"] < 1.0


def test_estimated_rate_excludes_a_fixed_noise_rate():
    with pytest.raises(ValueError, match="noise_rate must be null with rate: estimated"):
        PrismFamily.check_spec(
            PrismParams(noise_rate=0.2, rate="estimated"), {"rate": ["estimated"], "noise_rate": [0.2]}
        )
    PrismFamily.check_spec(PrismParams(rate="estimated"), {"rate": ["estimated"], "noise_rate": [None]})


def test_estimated_rate_comes_from_the_knn_vote_on_the_training_embeddings(tmp_path):
    from trainables.families.noise_detectors import knn_noise_rate

    spec = parse_spec(
        {
            "name": "prism_estimated",
            "family": "prism",
            "validation": {"kind": "none"},
            "dataset": {"name": "glyphs", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
            "train": {"epochs": 2, "classes_per_batch": 8, "samples_per_class": 4, "batches_per_epoch": 20},
            "params": {"memory_size": 256, "rate": "estimated"},
            "diagnostics": {"every": 0},
        }
    )
    trial = TrialRun.build(spec)
    family = trial.member.family
    assert family.noise_rate == 0.0  # the oracle's 0.2 is not used
    first = trial.run_epoch()
    assert first["prism_kept_share"] == 1.0  # nothing to select before the first estimate
    train = trial.member.data.train
    expected = knn_noise_rate(trial.member.embed(train), torch.as_tensor(train.labels))
    assert first["prism_estimated_rate"] == pytest.approx(expected) == family.noise_rate
    assert 0.0 < expected < 1.0
    trial.save(tmp_path)
    resumed = TrialRun.build(spec)
    resumed.restore(tmp_path)
    assert resumed.member.family.noise_rate == pytest.approx(expected)
    second = trial.run_epoch()
    assert second["prism_kept_share"] < 1.0

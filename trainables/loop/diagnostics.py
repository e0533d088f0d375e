"""Label-noise theory measured live: pair-noise rates, what the miner picks, and the triplet tolerance bound.

From "embedding losses under label noise" (``/work/shared/papers/embedding-losses-under-label-noise.txt``):
with uniform sample-label noise of rate p over K classes (Eq. 6), a pair's label is corrupted with
probability ``q_neg`` (a true negative pair looks positive, Eq. 7) or ``q_pos`` (a true positive pair looks
negative, Eq. 8). A miner that prefers close negatives over-samples the corrupted ones (true positives
labelled negative) by a skew η, and triplet loss stays tolerant only while ``p < 1 − sqrt(1 − 1/η)``
(Eq. 27, ε(K) dropped). :class:`NoiseDiagnostics` measures all of this on the batches a trial trains on.

Erratum, checked by brute force in ``tests/trainables/loop/test_diagnostics.py``: Eq. 8 as printed has
``p²(1 − 2/(K−1))`` for "both samples change into different labels"; two labels flipped independently and
uniformly among the K−1 other classes coincide with probability ``1/(K−1)``, so the exact term is
``p²(1 − 1/(K−1))``. :func:`q_pos` returns the exact rate (``paper=True`` gives the printed one).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pytorch_metric_learning.miners import BaseMiner
from sklearn.metrics import roc_auc_score

from trainables.schema import record as R
from trainables.schema.metric_names import (
    ETA_HAT,
    MINER_CORRUPT_NEG_SHARE,
    NOISE_AUROC,
    NOISE_PRECISION,
    NOISE_RECALL,
    P_BOUND_TRIPLET,
    Q_NEG,
    Q_NEG_OBS,
    Q_POS,
    Q_POS_OBS,
)

if TYPE_CHECKING:
    from pathlib import Path

    from torch import nn

    from trainables.families.base import Batch

__all__ = [
    "NoiseDiagnostics",
    "MinedNegatives",
    "SampleScoreTrace",
    "noise_detection",
    "q_neg",
    "q_pos",
    "p_bound_triplet",
    "pair_corruption_counts",
]

#: A sample whose clean score (BSPML: its weight) is below this is flagged as mislabeled.
FLAGGED_BELOW = 0.5


def q_neg(p: float, k: int) -> float:
    """Eq. 7: probability that a true negative pair is observed as positive (sample noise p, k classes)."""
    return 2 * p * (1 - p) / (k - 1) + p**2 * (k - 2) / (k - 1) ** 2


def q_pos(p: float, k: int, *, paper: bool = False) -> float:
    """Eq. 8: probability that a true positive pair is observed as negative.

    ``paper=True`` returns Eq. 8 as printed (``p²(1 − 2/(K−1))``); the default is the exact rate
    ``2p(1−p) + p²(1 − 1/(K−1))`` (see the module docstring).
    """
    return 2 * p * (1 - p) + p**2 * (1 - (2 if paper else 1) / (k - 1))


def p_bound_triplet(eta: float) -> float:
    """Eq. 27 without ε(K): the largest noise rate triplet loss tolerates at skew η (1 when η ≤ 1)."""
    return 1.0 if eta <= 1.0 else 1.0 - math.sqrt(1.0 - 1.0 / eta)


def pair_corruption_counts(observed: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """Counts over the unordered pairs i < j of one batch, as a float tensor of 4:

    [true positive pairs, of which observed negative, true negative pairs, of which observed positive].
    """
    upper = torch.ones(len(true), len(true), dtype=torch.bool, device=true.device).triu(1)
    same_true = (true[:, None] == true[None, :]) & upper
    diff_true = (true[:, None] != true[None, :]) & upper
    same_obs = observed[:, None] == observed[None, :]
    return torch.stack(
        [
            same_true.sum(),
            (same_true & ~same_obs).sum(),
            diff_true.sum(),
            (diff_true & same_obs).sum(),
        ]
    ).double()


class NoiseDiagnostics:
    """Per-epoch noise diagnostics of one trial; inactive (reports nothing) when the labels are clean.

    The loop calls :meth:`observe` after each batch's ``compute_loss`` and :meth:`epoch_metrics` once per
    epoch. Counts stay on the trial's device until the epoch ends (no per-batch host sync).

    Reported, with p the realised share of noisy training labels and K the number of training classes:
        q_pos, q_neg: Eq. 8 (exact form) and Eq. 7.
        q_pos_obs, q_neg_obs: of the true positive (negative) pairs in the sampled batches, the share whose
            observed labels differ (agree). P×K batches are balanced on *observed* labels, so these are the
            rates the loss actually sees, not a uniform sample of pairs.
        miner_corrupt_neg_share: of the (anchor, negative) pairs the family's miner selected (one per
            tuple), the share that are truly positive. Only for families that mine.
        eta_hat: that share divided by the base rate, the share of truly positive pairs among all
            observed-negative pairs of the same batches: the skew η of Sec. 4.2 (1 = no preference).
        p_bound_triplet: Eq. 27 at ``eta_hat``.
    """

    def __init__(self, observed: torch.Tensor, true: torch.Tensor) -> None:
        self.true = true
        self.noise_rate = float((observed != true).double().mean()) if len(true) else 0.0
        self.num_classes = int(torch.unique(true).numel())
        # [tp, tp→neg, tn, tn→pos, observed neg, observed neg truly pos, mined, mined truly pos]
        self._counts = torch.zeros(8, dtype=torch.float64, device=true.device)

    @property
    def active(self) -> bool:
        return self.noise_rate > 0 and self.num_classes > 1

    def observe(self, batch: Batch, mined: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Count the pairs of one batch and the (anchor, negative) pairs a miner selected from it."""
        if not self.active:
            return
        true = self.true[batch.indices]
        obs = batch.labels
        pairs = pair_corruption_counts(obs, true)
        # Observed-negative pairs that are truly positive: the base rate a uniform negative sampler gets.
        upper = torch.ones(len(obs), len(obs), dtype=torch.bool, device=obs.device).triu(1)
        obs_neg = (obs[:, None] != obs[None, :]) & upper
        base = torch.stack([obs_neg.sum(), (obs_neg & (true[:, None] == true[None, :])).sum()]).double()
        if mined is not None and len(mined[0]) and int(max(mined[0].max(), mined[1].max())) < len(true):
            anchors, negatives = mined
            picked = torch.stack(
                [
                    torch.tensor(len(anchors), device=obs.device),
                    (true[anchors] == true[negatives]).sum(),
                ]
            ).double()
        else:
            picked = torch.zeros(2, dtype=torch.float64, device=obs.device)
        self._counts += torch.cat([pairs, base, picked])

    def epoch_metrics(self) -> dict[str, float]:
        """This epoch's diagnostics (empty when inactive); resets the counts."""
        if not self.active:
            return {}
        tp, tp_flip, tn, tn_flip, obs_neg, obs_neg_true_pos, mined, mined_true_pos = self._counts.tolist()
        self._counts.zero_()
        p, k = self.noise_rate, self.num_classes
        out = {Q_POS: q_pos(p, k), Q_NEG: q_neg(p, k)}
        if tp:
            out[Q_POS_OBS] = tp_flip / tp
        if tn:
            out[Q_NEG_OBS] = tn_flip / tn
        if mined:
            share = mined_true_pos / mined
            out[MINER_CORRUPT_NEG_SHARE] = share
            if obs_neg_true_pos:
                eta = share / (obs_neg_true_pos / obs_neg)
                out[ETA_HAT] = eta
                out[P_BOUND_TRIPLET] = p_bound_triplet(eta)
        return out


class MinedNegatives:
    """What the family's pytorch-metric-learning miners selected in the last batch, observed by forward hooks.

    The loop installs it on the family once; no family keeps mining output for the diagnostics. PML miners return
    triplets ``(a, p, n)`` or pairs ``(a1, p, a2, n)``; the (anchor, negative) positions are decoded here, once.
    Several miners called on one batch (none of ours does) contribute all their negatives.
    """

    def __init__(self, family: nn.Module) -> None:
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.miners = [m for m in family.modules() if isinstance(m, BaseMiner)]
        self._handles = [m.register_forward_hook(self._record) for m in self.miners]

    def _record(self, module: nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> None:
        del module, args
        self._pairs.append((output[0], output[2]) if len(output) == 3 else (output[2], output[3]))

    def pop(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The negatives mined since the last call (``None`` if no miner ran), then forget them."""
        pairs, self._pairs = self._pairs, []
        if not pairs:
            return None
        return torch.cat([a for a, _ in pairs]), torch.cat([n for _, n in pairs])


def noise_detection(scores: np.ndarray, noisy: np.ndarray) -> dict[str, float]:
    """AUROC of ``1 − score`` as a "mislabeled" score, and precision/recall of the ``score < 0.5`` rule.

    Empty when the mask has a single class (no noise, or all noisy): AUROC is undefined there. Precision is 0
    when no score is below 0.5.
    """
    if noisy.all() or not noisy.any():
        return {}
    flagged = scores < FLAGGED_BELOW
    hits = float((flagged & noisy).sum())
    return {
        NOISE_AUROC: float(roc_auc_score(noisy, 1.0 - scores)),
        NOISE_PRECISION: hits / flagged.sum() if flagged.any() else 0.0,
        NOISE_RECALL: hits / noisy.sum(),
    }


class SampleScoreTrace:
    """The loop's view of a family's per-sample clean scores (BSPML's weights) against the recorded noise.

    Families never see the true labels; they expose :meth:`~trainables.families.base.BaseLossFamily.sample_scores` and
    the loop, which holds the noisy mask, reports ``noise_auroc``/``noise_precision``/``noise_recall`` each epoch
    and writes ``class_weights.parquet`` (per epoch and observed class: ``n``, ``mean_weight``, ``noisy_share``)
    and ``sample_weights.parquet`` (per sample: ``index``, ``label``, ``noisy``, ``weight``) for MLflow.
    """

    def __init__(self, labels: np.ndarray, true_labels: np.ndarray) -> None:
        self.labels = np.asarray(labels)
        self.noisy = self.labels != np.asarray(true_labels)
        self.classes, self.inverse = np.unique(self.labels, return_inverse=True)
        self.counts = np.bincount(self.inverse, minlength=self.classes.size)
        self.noisy_share = np.bincount(self.inverse, weights=self.noisy, minlength=self.classes.size) / np.maximum(
            self.counts, 1
        )
        self.history: list[dict[str, Any]] = []
        self.last: np.ndarray | None = None

    def observe(self, epoch: int, scores: torch.Tensor) -> dict[str, float]:
        w = scores.detach().double().cpu().numpy()
        self.last = w
        means = np.bincount(self.inverse, weights=w, minlength=self.classes.size) / np.maximum(self.counts, 1)
        self.history += [
            {
                R.WEIGHTS_EPOCH: epoch,
                R.WEIGHTS_CLASS: int(label),
                R.WEIGHTS_COUNT: int(self.counts[c]),
                R.WEIGHTS_CLASS_MEAN: float(means[c]),
                R.WEIGHTS_NOISY_SHARE: float(self.noisy_share[c]),
            }
            for c, label in enumerate(self.classes)
        ]
        return noise_detection(w, self.noisy)

    def write(self, directory: Path) -> None:
        if self.last is None:
            return
        import polars as pl  # deferred: only a trial that ends writes it (a GPU image without polars can train)

        pl.DataFrame(self.history).write_parquet(directory / R.CLASS_WEIGHTS_FILE)
        pl.DataFrame(
            {
                R.SAMPLE_INDEX: np.arange(self.labels.size),
                R.SAMPLE_LABEL: self.labels,
                R.SAMPLE_NOISY: self.noisy,
                R.SAMPLE_WEIGHT: self.last,
            }
        ).write_parquet(directory / R.SAMPLE_WEIGHTS_FILE)

    def state(self) -> dict[str, Any]:
        return {"history": list(self.history), "last": self.last}

    def load_state(self, state: dict[str, Any]) -> None:
        self.history, self.last = list(state["history"]), state["last"]

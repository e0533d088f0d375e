"""Probabilistic Ranking-based Instance Selection with Memory (family ``prism``).

Liu, Yu, Li, Shen, Gao, Ren, Xie, Cui, Miao, "Noise-resistant Deep Metric Learning with Ranking-based Instance
Selection", CVPR 2021 (https://arxiv.org/abs/2103.16047); followed from the authors' code,
github.com/alibaba-edu/Ranking-based-Instance-Selection (cited below as ``repo:<file>:<lines>``). Per batch:

1. **Clean probability** (paper Sec. 3.2-3.3, the class-centre acceleration; ``repo:ret_benchmark/losses/
   memory_contrastive_loss_w_PRISM.py:60-70``): each class ``k`` has a centre ``c_k``, the mean of its features in
   the cross-batch memory; a sample with label ``y`` gets ``P(clean) = exp(f·c_y) / Σ_k exp(f·c_k)`` over every
   training class (centres start at zero, so a class never seen in memory adds ``e^0``: ``repo:.../PRISM.py:18``).
   A sample whose class has no centre yet scores 1. Centres are recomputed only for the classes the last batch
   enqueued (``update_center``, ``:24-31``) — here right after the enqueue, which is the same memory.
2. **Selection** (the noise-rate threshold with its sliding window, the paper's "sTRM"; ``:71-91``) —
   :func:`select_clean`: the ``floor(R·n)`` lowest-ranked samples are the candidates for removal; the largest
   candidate probability joins a window of the last ``window_size`` such values (unless it is 1 or NaN); a sample
   is kept iff its probability exceeds the window's mean; if that keeps nobody, the top-R rule is used and the
   window shrinks to its last value.
3. **Loss** (the paper trains PRISM with XBM's memory contrastive loss; ``memory_contrastive_loss_w_PRISM.py:41-
   119``, ``repo:ret_benchmark/engine/trainer.py:156-180``): the contrastive loss on cosine similarity (positive
   pairs ``1 − s``, negative pairs with ``s > 0.5``) of the kept samples among themselves (divided by their number)
   plus ``memory_weight`` × the same loss of the kept samples against the memory (divided by the batch size).
   Both use pytorch-metric-learning's ``ContrastiveLoss(pos_margin=1, neg_margin=0.5)`` with a sum reducer; its
   negative term is ``s − 0.5`` where PRISM writes ``s``: equal gradients, a constant offset in the logged value.
4. **Memory** (XBM, Wang et al. CVPR 2020; ``repo:ret_benchmark/modeling/xbm.py``): pytorch-metric-learning's
   ``CrossBatchMemory`` ring buffer; only the kept samples are enqueued, after the loss (``trainer.py:190-191``).

The family never sees the true labels. :meth:`PrismFamily.sample_scores` is each sample's clean probability the
last time it was in a batch, calibrated to PRISM's own decision (:func:`calibrated_score`: ``p / (p + τ)`` with
``τ`` the threshold applied in that batch), a monotone map of ``p`` within a batch that is below 0.5 exactly when
PRISM dropped the sample (a softmax over ~100 centres is far below 0.5 for clean samples too). The
loop scores it against the recorded noise (``noise_auroc``, ``noise_precision``/``noise_recall`` of score < 0.5)
as it scores BSPML's weights.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from pytorch_metric_learning import distances, losses, reducers

from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.noise_detectors import knn_noise_rate
from trainables.families.prism.params import PrismParams, PrismRules
from trainables.schema import metric_names as names

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PrismParams", "PrismFamily", "select_clean", "clean_probability", "calibrated_score"]


def clean_probability(
    embeddings: torch.Tensor, labels: torch.Tensor, centres: torch.Tensor, filled: torch.Tensor
) -> torch.Tensor:
    """PRISM's ``P(clean)`` of each sample: the softmax over all class centres of ``f·c_k``, read at its label
    (``labels`` are contiguous class ids, rows of ``centres``); 1 where the label's centre is not filled yet."""
    prob = torch.softmax(embeddings.float() @ centres.float().T, dim=1).gather(1, labels[:, None]).squeeze(1)
    return torch.where(filled[labels], prob, torch.ones_like(prob))


def select_clean(
    prob: torch.Tensor, noise_rate: float, window: list[float], window_size: int
) -> tuple[torch.Tensor, float, list[float]]:
    """PRISM's selection rule on one batch: ``(keep mask, threshold applied, new window)``.

    See the module docstring (step 2); ``repo:ret_benchmark/losses/memory_contrastive_loss_w_PRISM.py:71-91``.
    With ``floor(R·n) = 0`` there is no candidate (PRISM's code would index an empty list): the window is left
    as it is and, while it is empty, every sample is kept (threshold 0).
    """
    n = prob.numel()
    k = int(noise_rate * n)
    order = torch.argsort(prob, stable=True)
    top_r = torch.ones(n, dtype=torch.bool, device=prob.device)
    top_r[order[:k]] = False
    boundary = float(prob[order[k - 1]]) if k > 0 else math.nan
    if k > 0 and not math.isnan(boundary) and boundary != 1.0:
        window = [*window, boundary][-window_size:]
    if not window:
        return top_r, (boundary if k > 0 else 0.0), window
    threshold = sum(window) / len(window)
    keep = prob > threshold
    if not bool(keep.any()):
        return top_r, boundary, window[-1:]
    return keep, threshold, window


def calibrated_score(prob: torch.Tensor, threshold: float, keep: torch.Tensor) -> torch.Tensor:
    """``p / (p + τ)``: monotone in ``p`` within a batch, 0.5 at PRISM's threshold τ; a dropped sample sitting
    exactly on τ (the window's only value is its own probability) is put just below 0.5, so that ``score < 0.5``
    is exactly PRISM's decision."""
    score = prob / (prob + threshold)
    below = torch.nextafter(torch.tensor(0.5, dtype=score.dtype), torch.tensor(0.0, dtype=score.dtype))
    return torch.where(keep, score.clamp(min=0.5), score.clamp(max=float(below)))


class PrismFamily(PrismRules, BaseLossFamily[PrismParams]):
    """PRISM: ranking-based instance selection against a cross-batch memory, trained with the memory contrastive
    loss."""

    # Buffers (checkpointed with the family) and the pytorch-metric-learning modules, typed for the checker.
    classes: torch.Tensor
    centres: torch.Tensor
    filled: torch.Tensor
    clean_prob: torch.Tensor
    score: torch.Tensor
    iteration: torch.Tensor
    contrastive: Any
    memory: Any

    def __init__(self, params: PrismParams, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        if params.rate == "estimated":
            self.noise_rate = 0.0  # until the first estimate, at the end of epoch 1
        else:
            self.noise_rate = ctx.noise_rate if params.noise_rate is None else params.noise_rate
        self.register_buffer("classes", torch.unique(ctx.train_labels))
        n_classes, dim = int(self.classes.numel()), ctx.embedding_dim
        self.contrastive = losses.ContrastiveLoss(
            pos_margin=1.0,
            neg_margin=params.margin,
            distance=distances.CosineSimilarity(),
            reducer=reducers.SumReducer(),
        )
        # The ring buffer only: PRISM computes its loss against the memory as it was *before* the batch is
        # enqueued, and enqueues the kept samples alone.
        self.memory = losses.CrossBatchMemory(self.contrastive, dim, memory_size=params.memory_size)
        self.register_buffer("centres", torch.zeros(n_classes, dim, device=ctx.device))
        self.register_buffer("filled", torch.zeros(n_classes, dtype=torch.bool, device=ctx.device))
        self.register_buffer("clean_prob", torch.ones(ctx.num_train, device=ctx.device))
        self.register_buffer("score", torch.ones(ctx.num_train, device=ctx.device))
        self.register_buffer("iteration", torch.tensor(0, dtype=torch.long, device=ctx.device))
        self.window: list[float] = []
        self._epoch_thresholds: list[float] = []
        self._epoch_kept: list[float] = []

    # ------------------------------------------------------------------------------------------- memory

    def _memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.memory
        size = m.memory_size if m.has_been_filled else m.queue_idx
        return m.embedding_memory[:size], m.label_memory[:size]

    def _enqueue(self, embeddings: torch.Tensor, labels: torch.Tensor) -> None:
        """Add the kept samples to the memory, then recompute the centres of their classes (``update_center``)."""
        if embeddings.shape[0] == 0:
            return
        self.memory.add_to_memory(embeddings.detach().float(), labels, embeddings.shape[0])
        feats, mem_labels = self._memory()
        touched = torch.unique(labels)
        same = (mem_labels[None, :] == touched[:, None]).float()  # (classes touched, memory size)
        self.centres[touched] = (same @ feats) / same.sum(1, keepdim=True)
        self.filled[touched] = True

    # ------------------------------------------------------------------------------------------- θ-step

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        prm = self.params
        emb = embeddings.float()
        labels = torch.searchsorted(self.classes, batch.labels)  # observed labels → contiguous class ids
        n = emb.shape[0]
        use_memory = int(self.iteration) >= prm.memory_start
        mem_emb, mem_labels = self._memory()
        keep = torch.ones(n, dtype=torch.bool, device=emb.device)
        if use_memory and mem_emb.shape[0] > 0 and int(self.iteration) >= prm.warm_up:
            with torch.no_grad():
                prob = clean_probability(emb.detach(), labels, self.centres, self.filled)
                keep, threshold, self.window = select_clean(prob, self.noise_rate, self.window, prm.window_size)
            self.clean_prob[batch.indices] = prob
            self.score[batch.indices] = calibrated_score(prob, threshold, keep)
            self._epoch_thresholds.append(threshold)
        self._epoch_kept.append(float(keep.float().mean()))
        kept, kept_labels = emb[keep], labels[keep]
        terms = {self.name: self.contrastive(kept, kept_labels) / max(int(keep.sum()), 1)}
        memory_loss = emb.sum() * 0  # before memory_start, and against an empty memory: nothing to contrast
        if use_memory and mem_emb.shape[0] > 0:
            memory_loss = self.contrastive(kept, kept_labels, ref_emb=mem_emb, ref_labels=mem_labels) / n
        terms["memory"] = prm.memory_weight * memory_loss
        if use_memory:
            self._enqueue(kept, kept_labels)
        self.iteration += 1
        return terms

    # ----------------------------------------------------------------------------------------- metrics

    def on_epoch_end(
        self, epoch: int, embed_train: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    ) -> dict[str, float]:
        del epoch
        scores = self.sample_scores()
        metrics = {}
        if self.params.rate == "estimated":
            embeddings, indices = embed_train()
            ordered = torch.empty_like(embeddings)
            ordered[indices] = embeddings
            self.noise_rate = knn_noise_rate(ordered, self.ctx.train_labels)
            metrics[names.PRISM_ESTIMATED_RATE] = self.noise_rate
        metrics |= {
            names.PRISM_KEPT_SHARE: float(np.mean(self._epoch_kept)) if self._epoch_kept else 1.0,
            names.EXCLUDED_SHARE: float((scores < 0.5).float().mean()),
        }
        if self._epoch_thresholds:
            metrics[names.PRISM_THRESHOLD] = float(np.mean(self._epoch_thresholds))
        self._epoch_thresholds, self._epoch_kept = [], []
        return metrics

    def sample_scores(self) -> torch.Tensor:
        """:func:`calibrated_score` of each sample's last clean probability (1 before it was first scored)."""
        return self.score

    def get_extra_state(self) -> dict[str, Any]:
        """The clean-probability window, the noise rate and the memory queue's position (torch's extra-state hook:
        ``state_dict()`` carries it)."""
        return {
            "window": list(self.window),
            "noise_rate": self.noise_rate,
            "queue_idx": int(self.memory.queue_idx),
            "has_been_filled": bool(self.memory.has_been_filled),
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.window = list(state.get("window", []))
        self.noise_rate = float(state.get("noise_rate", self.noise_rate))
        self.memory.queue_idx = int(state.get("queue_idx", 0))
        self.memory.has_been_filled = bool(state.get("has_been_filled", False))

"""Label-free noise detectors: per training sample, how likely its label is wrong, from (embeddings, labels) alone.

Each detector returns a "noisiness" score (higher = more likely mislabeled) from the training embeddings and the
*observed* labels only; none sees the true labels. The loop (:class:`NoiseDetectorTrace`, which holds the recorded
noisy mask) scores each one against the noise every ``diagnostics.every`` epochs, so a study shows which signal finds
the noise and whether a family's own selection (BSPML's weights, PRISM's clean probability) uses it:

- :func:`xi_score`: BSPML's per-sample loss ξ = ξ⁺ + ξ⁻ of Eq. 3 (Zhang et al., AAAI 2023,
  https://arxiv.org/abs/2212.01848), computed by BSPML's own :func:`~trainables.families.self_paced.ms_terms` with the
  paper's MS constants (α = 2, β = 50, ρ = 1; :class:`~trainables.families.bspml.params.SPMSParams` defaults), whatever the family.
- :func:`centroid_score`: PRISM's class-centre clean probability (Liu et al., CVPR 2021, Sec. 3.3,
  https://arxiv.org/abs/2103.16047): ``p = softmax_k(cos(f, c_k) / T)`` at the sample's own label, score ``1 − p``.
  The centres are the class means of the L2-normalised embeddings, the sample included (PRISM's centres come
  from a memory that holds the sample's own past features too), and are themselves normalised (cosine).
- :func:`knn_score`: a kNN vote (the N2D2 / deep-kNN filtering rule; Bahri et al., ICML 2020,
  https://arxiv.org/abs/2004.11600): the share of the sample's k nearest other samples (cosine, faiss; itself
  excluded by index) whose label differs from its own. :func:`knn_noise_rate` turns it into a noise-rate estimate
  (a zero-truncated binomial mixture of the agreeing counts), which PRISM's ``rate: estimated`` uses.

AUROC and average precision come from scikit-learn (:func:`detection_scores`). The detectors live with the families
(PRISM and kNN rejection select samples with them; ξ is BSPML's loss); the loop scores every one of them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score

from trainables.families.bspml.params import SPMSParams
from trainables.families.self_paced import ms_terms
from trainables.metrics.neighbours import knn_indices
from trainables.schema.metric_names import NOISE_DETECTORS, noise_detector_ap, noise_detector_auroc

__all__ = [
    "xi_score",
    "centroid_score",
    "knn_score",
    "knn_noise_rate",
    "knn_majority_rate",
    "detection_scores",
    "detector_scores",
    "NoiseDetectorTrace",
    "KNN_K",
]

#: Neighbours of the kNN vote (self excluded).
KNN_K = 10


def _contiguous(labels: torch.Tensor) -> torch.Tensor:
    return torch.unique(labels, return_inverse=True)[1]


@torch.no_grad()
def xi_score(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    *,
    alpha: float = SPMSParams.ms_alpha,
    beta: float = SPMSParams.ms_beta,
    base: float = SPMSParams.ms_base,
    chunk_size: int = SPMSParams.chunk_size,
) -> torch.Tensor:
    """ξ⁺ + ξ⁻ of Eq. 3 per sample (all same-label positives, all other-label negatives), shape ``(N,)``.

    A mislabeled sample sits among its true class, far from the samples sharing its (wrong) label: large ξ⁺, and
    close to "negatives" of its true class: large ξ⁻.
    """
    x = F.normalize(embeddings.float(), dim=1)
    xi_pos, xi_neg = ms_terms(x, _contiguous(labels).to(x.device), alpha, beta, base, chunk_size)
    return xi_pos + xi_neg


@torch.no_grad()
def centroid_score(embeddings: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``1 − softmax_k(cos(f_i, c_k)/T)[y_i]`` with ``c_k`` the mean normalised embedding of label k, shape ``(N,)``.

    ``T = 1`` is PRISM's (no temperature: ``exp(f·c_k)``).
    """
    x = F.normalize(embeddings.float(), dim=1)
    y = _contiguous(labels).to(x.device)
    num_classes = int(y.max()) + 1 if y.numel() else 0
    centres = torch.zeros(num_classes, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, y, x)
    centres = F.normalize(centres, dim=1)  # the mean's direction; the 1/N^k factor cancels
    prob = torch.softmax(x @ centres.T / temperature, dim=1).gather(1, y[:, None]).squeeze(1)
    return 1.0 - prob


@torch.no_grad()
def knn_score(embeddings: torch.Tensor, labels: torch.Tensor, k: int = KNN_K) -> torch.Tensor:
    """Share of each sample's ``k`` nearest other samples (cosine) whose label differs from its own, ``(N,)``.

    ``k`` is capped at N − 1. Neighbours come from :func:`trainables.metrics.neighbours.knn_indices` (faiss, GPU when
    there).
    """
    x = F.normalize(embeddings.float(), dim=1)
    n = x.shape[0]
    k = min(k, n - 1)
    if k < 1:
        return torch.zeros(n, device=embeddings.device)
    neighbours = knn_indices(x.cpu().numpy(), k)
    y = labels.cpu().numpy()
    disagree = (y[neighbours] != y[:, None]).mean(axis=1)
    return torch.as_tensor(disagree, dtype=torch.float32, device=embeddings.device)


def knn_noise_rate(embeddings: torch.Tensor, labels: torch.Tensor, k: int = KNN_K) -> float:
    """Estimated noise rate from the kNN vote: a zero-truncated binomial mixture of the agreeing-neighbour counts.

    Why not the share of samples whose majority disagrees: a young embedding seldom puts many same-class samples
    among the k nearest (glyphs has 12 per class), so most *clean* samples lose the vote too (95 % "noisy" after
    one epoch on glyphs at 20 % noise). Instead: a mislabeled sample sits among its true class, whose samples
    carry its true label, so (almost) none of its neighbours agrees; a clean sample's agreeing count is modelled as
    Binomial(k, θ). The samples with at least one agreeing neighbour are then clean, and their mean count
    ``m = kθ / (1 − (1 − θ)^k)`` gives θ (bisection); with ``P0 = (1 − θ)^k`` the clean samples' chance of no
    agreeing neighbour, the share Z of samples with none is ``p + (1 − p)·P0``, so ``p = (Z − P0) / (1 − P0)``,
    clipped to [0, 1). Heterogeneous θ (some classes easier) puts more clean samples at zero than the binomial
    says, so p is over- rather than under-estimated.
    """
    disagree = knn_score(embeddings, labels, k).double().cpu().numpy()
    k = min(k, len(disagree) - 1)
    if k < 1:
        return 0.0
    counts = np.rint((1.0 - disagree) * k)
    zero_share = float((counts == 0).mean())
    agreeing = counts[counts > 0]
    if agreeing.size == 0:
        return float(np.nextafter(1.0, 0.0))
    m = float(agreeing.mean())
    lo, hi = 1e-9, 1.0
    for _ in range(100):  # m(θ) increases from 1 (θ → 0) to k (θ = 1)
        mid = 0.5 * (lo + hi)
        if k * mid / (1.0 - (1.0 - mid) ** k) < m:
            lo = mid
        else:
            hi = mid
    p0 = (1.0 - lo) ** k
    if p0 >= 1.0:
        return float(np.nextafter(1.0, 0.0))
    return float(np.clip((zero_share - p0) / (1.0 - p0), 0.0, np.nextafter(1.0, 0.0)))


def knn_majority_rate(embeddings: torch.Tensor, labels: torch.Tensor, k: int = KNN_K) -> float:
    """The naive estimate :func:`knn_noise_rate` improves on: the share of samples most of whose k neighbours
    carry another label (kept for comparison in docs/notebook/prism.md)."""
    return float((knn_score(embeddings, labels, k) > 0.5).float().mean())


def detection_scores(score: np.ndarray, noisy: np.ndarray) -> tuple[float, float]:
    """(AUROC, average precision) of ``score`` as a detector of ``noisy`` (scikit-learn); both need both classes."""
    return float(roc_auc_score(noisy, score)), float(average_precision_score(noisy, score))


def detector_scores(embeddings: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every detector's score on one set of embeddings, by detector name (:data:`NOISE_DETECTORS`)."""
    scores = {"xi": xi_score(embeddings, labels), "centroid": centroid_score(embeddings, labels)}
    scores["knn"] = knn_score(embeddings, labels)
    assert tuple(scores) == NOISE_DETECTORS
    return scores


class NoiseDetectorTrace:
    """The loop's scoring of the detectors against the recorded noise (the true labels stay with the loop).

    Inactive (reports nothing) when the training labels are clean, all noisy, or ``every`` is 0. Cost per scored
    epoch: one embedding pass of the training set (shared with a family that embeds it in the same epoch, e.g.
    BSPML's w-step) plus ξ's and the kNN search's N × N similarities (chunked; O(N²·D)) and the centres' N × C.
    """

    def __init__(self, labels: torch.Tensor, noisy: np.ndarray, every: int) -> None:
        self.labels = labels
        self.noisy = np.asarray(noisy, dtype=bool)
        self.every = every

    def due(self, epoch: int) -> bool:
        return self.every > 0 and epoch % self.every == 0 and bool(self.noisy.any()) and not self.noisy.all()

    def metrics(self, embeddings: torch.Tensor) -> dict[str, float]:
        """``noise/<detector>_auroc`` and ``noise/<detector>_ap`` of each detector on ``embeddings`` (ctx order)."""
        out = {}
        for name, score in detector_scores(embeddings, self.labels).items():
            auroc, ap = detection_scores(score.double().cpu().numpy(), self.noisy)
            out[noise_detector_auroc(name)] = auroc
            out[noise_detector_ap(name)] = ap
        return out

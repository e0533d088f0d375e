"""Balanced self-paced metric learning (families ``bspml`` and ``spms``).

Zhang, Luo, Gu, "Denoising Multi-Similarity Formulation: A Self-paced Curriculum-Driven Approach for Robust
Metric Learning", AAAI 2023 (https://arxiv.org/abs/2212.01848). Alg. 1 alternates

- the θ-step (Alg. 2): P×K batches, MS informative-pair mining (Eq. 4-5), the weighted informative batch
  loss of Eq. 7 with the current sample weights — :func:`weighted_ms_loss`;
- the w-step (Alg. 3, Eq. 8) after every ``epochs_per_round`` epochs: embed the training set, compute ξ⁺/ξ⁻
  (Eq. 3) and run the doubly stochastic projected coordinate gradient — :mod:`trainables.families.self_paced`;
- the age schedule λ ← min(c·λ, λ∞).

``spms`` is the paper's SPMS ablation: the same method without the balance term (μ = 0; it has no ``mu``).

Weights, λ and the round counter are buffers (checkpointed with the family). The family never sees the true
labels: it exposes its weights as :meth:`~SelfPacedMSFamily.sample_scores`, and the loop scores them against the
recorded noise (``noise_auroc``, ...) and writes ``class_weights.parquet`` / ``sample_weights.parquet``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from pytorch_metric_learning import miners

from trainables.families.base import BaseLossFamily, Batch, FamilyContext
from trainables.families.bspml.params import BSPMLParams, BSPMLRules, SPMSParams, SPMSRules
from trainables.families.self_paced import (
    ClassIndex,
    SolveReport,
    WeightProblem,
    converge_weights,
    denoising_objective,
    log1p_sum_exp,
    ms_terms,
    projected_residual,
    solve_weights,
)
from trainables.schema import metric_names as names

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SPMSParams", "BSPMLParams", "SelfPacedMSFamily", "BSPMLFamily", "weighted_ms_loss"]

#: SPMS and BSPML, whose ``Params`` extends SPMS's.
_SelfPacedParams = TypeVar("_SelfPacedParams", bound=SPMSParams)

#: Weights below this count as "excluded" (and as a prediction of "mislabeled").
EXCLUDED_BELOW = 0.5


def weighted_ms_loss(
    embeddings: torch.Tensor,
    weights: torch.Tensor,
    pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    alpha: float,
    beta: float,
    base: float,
) -> torch.Tensor:
    """The weighted informative batch loss of Eq. 7 (as in SPEC: mean informative-pair weights × ξ).

    ``L = 1/(PK) Σ_i w_i [mean_{p∈P̂_i}(w_p)·ξ⁺_i + mean_{n∈N̂_i}(w_n)·ξ⁻_i]`` with ξ over the
    informative pairs ``pairs = (a1, p, a2, n)`` of MS mining. With every w = 1 it is PML's ``MultiSimilarityLoss``.
    """
    b = embeddings.shape[0]
    embeddings = embeddings.float()  # exp(β·S) in half precision (AMP) loses the small ξ⁻ entirely
    sim = embeddings @ embeddings.T
    pos = torch.zeros((b, b), dtype=torch.bool, device=embeddings.device)
    neg = torch.zeros_like(pos)
    a1, p, a2, n = pairs
    pos[a1, p] = True
    neg[a2, n] = True
    xi_pos = log1p_sum_exp(-alpha * (sim - base), pos) / alpha
    xi_neg = log1p_sum_exp(beta * (sim - base), neg) / beta
    w = weights.to(sim.dtype)
    mean_wp = (pos.to(w.dtype) @ w) / pos.sum(1).clamp(min=1)
    mean_wn = (neg.to(w.dtype) @ w) / neg.sum(1).clamp(min=1)
    return (w * (mean_wp * xi_pos + mean_wn * xi_neg)).sum() / b


class SelfPacedMSFamily(SPMSRules, BaseLossFamily[_SelfPacedParams]):
    """SPMS: self-paced sample weights on the MS loss, no balance term."""

    # Buffers registered in __init__ (checkpointed with the family), typed for mypy (nn.Module's __getattr__ is not).
    weights: torch.Tensor
    lam: torch.Tensor
    rounds: torch.Tensor
    lam_used: torch.Tensor

    def __init__(self, params: _SelfPacedParams, ctx: FamilyContext) -> None:
        super().__init__(params, ctx)
        self.miner = miners.MultiSimilarityMiner(epsilon=params.ms_epsilon)
        # Observed labels → contiguous ids 0..C-1 for the per-class solver bookkeeping.
        _, labels = torch.unique(ctx.train_labels, return_inverse=True)
        self.index = ClassIndex.build(labels)
        self.register_buffer("weights", torch.ones(ctx.num_train, device=ctx.device))
        self.register_buffer("lam", torch.tensor(params.initial_lambda, dtype=torch.float64, device=ctx.device))
        self.register_buffer("rounds", torch.tensor(0, dtype=torch.long, device=ctx.device))
        #: λ the current weights were solved with (λ0 before the first w-step).
        self.register_buffer("lam_used", torch.tensor(params.initial_lambda, dtype=torch.float64, device=ctx.device))
        self.generator = torch.Generator(device=ctx.device)
        self.generator.manual_seed(ctx.seed)
        #: What the last w-step did (logged each epoch; not checkpointed: a resumed trial logs it after its next w-step).
        self.report: SolveReport | None = None
        self.lam_absolute = params.initial_lambda

    # ------------------------------------------------------------------------------------------- θ-step

    def compute_loss(self, embeddings: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        prm = self.params
        pairs = self.miner(embeddings, batch.labels)
        w = self.weights[batch.indices]
        loss = weighted_ms_loss(embeddings, w, pairs, prm.ms_alpha, prm.ms_beta, prm.ms_base)
        return {self.name: loss}

    # ------------------------------------------------------------------------------------------- w-step

    def losses_and_age(self, embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """Every w-step's opening: each sample's MS terms ξ⁺, ξ⁻ (Eq. 3) on the epoch's embedding, the age λ, and λ
        in the units of ξ (``lambda_scale: relative``: λ · mean ξ; else λ itself)."""
        prm = self.params
        labels = self.index.labels.to(embeddings.device)
        xi_pos, xi_neg = ms_terms(
            embeddings, labels, prm.ms_alpha, prm.ms_beta, prm.ms_base, prm.chunk_size, prm.topk_negatives
        )
        lam = float(self.lam)
        absolute = lam * float((xi_pos + xi_neg).double().mean()) if prm.lambda_scale == "relative" else lam
        return xi_pos, xi_neg, lam, absolute

    def weight_step(self, embeddings: torch.Tensor) -> None:
        """One w-step (Alg. 3) with the current λ, then λ ← min(c·λ, λ∞) (Alg. 1 line 5)."""
        prm = self.params
        xi_pos, xi_neg, lam, absolute = self.losses_and_age(embeddings)
        start = self.weights if prm.solver_init == "warm" else torch.ones_like(self.weights)
        if prm.solver == "converged":
            problem = WeightProblem(xi_pos.double(), xi_neg.double(), self.index, absolute, prm.balance)
            solved, self.report = converge_weights(
                problem, start.double(), tol=prm.solver_tol, max_sweeps=prm.solver_max_sweeps
            )
        else:
            problem = WeightProblem(xi_pos, xi_neg, self.index, absolute, prm.balance)
            before = float(denoising_objective(problem, start))
            solved = solve_weights(
                problem, start, **prm.sampled_solver(), generator=self.generator, stochastic=prm.solver == "stochastic"
            )
            exact = WeightProblem(xi_pos.double(), xi_neg.double(), self.index, absolute, prm.balance)
            after = float(denoising_objective(problem, solved))
            self.report = SolveReport(before, after, projected_residual(exact, solved.double()), prm.solver_sweeps)
        self.weights.copy_(solved)
        self.lam_used.fill_(lam)
        self.lam_absolute = absolute
        self.lam.fill_(min(prm.lambda_growth * lam, prm.lambda_max))
        self.rounds += 1

    def on_epoch_end(
        self, epoch: int, embed_train: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    ) -> dict[str, float]:
        if epoch % self.params.epochs_per_round == 0:
            embeddings, indices = embed_train()
            ordered = torch.empty_like(embeddings)
            ordered[indices] = embeddings
            self.weight_step(ordered)
        return self._record(epoch)

    # ----------------------------------------------------------------------------------------- metrics

    def _record(self, epoch: int) -> dict[str, float]:
        del epoch
        w = self.weights.detach().double().cpu().numpy()
        class_avg = self.index.class_means(self.weights.detach().double()).cpu().numpy()
        q10, q50, q90 = np.quantile(w, [0.1, 0.5, 0.9])
        return {
            names.LAMBDA: float(self.lam_used),
            names.MAW: float(class_avg.mean()),  # Eq. 14
            names.SDAW: float(class_avg.std()),  # Eq. 14 (population std, 1/C)
            names.W_Q10: float(q10),
            names.W_Q50: float(q50),
            names.W_Q90: float(q90),
            names.EXCLUDED_SHARE: float((w < EXCLUDED_BELOW).mean()),
            **self._solver_metrics(),
        }

    def _solver_metrics(self) -> dict[str, float]:
        """The last w-step's Eq. 6 before/after, residual and sweeps, and the λ it used in ξ units (absent
        before the first w-step)."""
        if self.report is None:
            return {}
        return {
            names.W_OBJECTIVE_BEFORE: self.report.objective_before,
            names.W_OBJECTIVE_AFTER: self.report.objective_after,
            names.W_RESIDUAL: self.report.residual,
            names.W_SWEEPS: float(self.report.sweeps),
            names.LAMBDA_ABSOLUTE: self.lam_absolute,
        }

    def sample_scores(self) -> torch.Tensor:
        """The self-paced weights: a sample the solver excludes (w → 0) is one it believes mislabeled."""
        return self.weights

    def get_extra_state(self) -> dict[str, Any]:
        """The solver's generator state, which ``state_dict()`` carries (torch's extra-state hook)."""
        return {"generator": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if "generator" in state:
            self.generator.set_state(state["generator"].cpu())  # torch.load may have mapped it to the GPU


class BSPMLFamily(BSPMLRules, SelfPacedMSFamily[BSPMLParams]):
    """BSPML: SPMS plus the class-balance regulariser (μ); the solver reads it from ``BSPMLParams.balance``."""

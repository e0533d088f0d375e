"""``spms``' and ``bspml``'s parameters (self-paced MS, BSPML: https://arxiv.org/abs/2212.01848) and their rule
λ0 ≤ λ∞; ``spl`` shares the rule (:mod:`trainables.families.spl.params`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypedDict

from pydantic import Field

from trainables.families.ms.params import MSParams
from trainables.families.rules import FamilyRules, NonNegative, Positive, PositiveInt
from trainables.schema import metric_names as names

__all__ = ["SPMSParams", "BSPMLParams", "SPMSRules", "BSPMLRules", "SampledSolver"]


class SampledSolver(TypedDict):
    """Keyword arguments of :func:`~trainables.families.self_paced.solve_weights` (Alg. 3's settings)."""

    gamma: float
    sweeps: int
    block: int
    p: int
    k: int


@dataclass(frozen=True)
class SPMSParams(MSParams):
    """Hyperparameters of SPMS (self-paced MS without the balance term): :class:`MSParams` plus the schedule and
    the w-step solver.

    Defaults are the paper's (https://arxiv.org/abs/2212.01848 Sec. 5) where it gives them; λ0, c, γ and the
    solver sizes are not reported and were chosen so that weights move within a few rounds.

    Args:
        lambda0: λ0, the initial age of Alg. 1. A value above ``lambda_max`` starts at ``lambda_max``
            (λ0 is capped, not rejected, because a search samples the two independently).
        lambda_growth: c of Alg. 1; after each round λ ← min(c·λ, λ∞). Must be ≥ 1.
        lambda_max: λ∞, the cap of the age (the paper tunes it in [1, 5]).
        epochs_per_round: θ-step epochs per outer round of Alg. 1 (a w-step follows each round).
        solver_sweeps: ``stochastic``/``full``: updates of each weight per w-step (Alg. 3's T = sweeps·N).
        solver_block: ``stochastic``/``full``: coordinates updated together per step (1 = the paper's method).
        gamma: ``stochastic``/``full``: γ, the step size of Alg. 3 (Eq. 8's G carries a 1/N^c factor).
        solver_p: P of Alg. 3, other classes sampled per coordinate.
        solver_k: K of Alg. 3, weights sampled per class.
        topk_negatives: ξ⁻ of the w-step from the k most similar negatives only (null: all negatives).
        chunk_size: rows of the similarity matrix computed at once in the w-step.
        solver: ``converged`` (default: the subproblem solved to ``solver_tol`` by class-normalised projected
            gradient steps with an exact line search, :func:`~trainables.families.self_paced.converge_weights`),
            ``stochastic`` (Alg. 3 as written: ``solver_sweeps`` sweeps of the doubly stochastic gradient of
            Eq. 8 with step γ) or ``full`` (Alg. 3's steps with the exact gradient of Eq. 6).
        solver_tol: ``converged`` stops when the projected-gradient residual (Eq. 10 with the class-normalised
            step N^c, in weight units) is at most this.
        solver_max_sweeps: ``converged`` stops after this many steps whatever the residual (logged).
        solver_init: the w-step starts from ``ones`` (default) or from the last w-step's weights (``warm``).
            Alg. 3 takes w⁰ as an input and Alg. 1 does not say which; the subproblem is nonconvex and a warm
            start keeps the last round's partition (glyphs: noise AUROC 0.52 at the optimum reached from the
            warm start, 0.75-0.79 from ones, and a lower objective from ones).
        lambda_scale: ``absolute`` (the paper: λ0 and λ∞ as given) or ``relative`` (λ in units of the
            epoch's mean ξ⁺ + ξ⁻ over the training set: the w-step uses λ·mean ξ, so a schedule keeps its
            meaning across datasets; with equal weights in a class Eq. 6 is stationary near a class-mean
            weight of λ_abs / 2ξ̄).
    """

    lambda0: Positive = 1.0
    lambda_growth: Annotated[float, Field(ge=1)] = 1.1  # the age never shrinks
    lambda_max: Positive = 3.0
    epochs_per_round: PositiveInt = 1
    solver_sweeps: PositiveInt = 20
    solver_block: PositiveInt = 1024
    gamma: Positive = 5.0
    solver_p: PositiveInt = 16
    solver_k: PositiveInt = 4
    topk_negatives: PositiveInt | None = None
    chunk_size: PositiveInt = 1024
    solver: Literal["converged", "stochastic", "full"] = "converged"
    solver_tol: Positive = 1e-3
    solver_max_sweeps: PositiveInt = 1000
    solver_init: Literal["ones", "warm"] = "ones"
    lambda_scale: Literal["absolute", "relative"] = "absolute"

    @property
    def balance(self) -> float:
        """μ of Eq. 6/8 (0 for SPMS)."""
        return 0.0

    @property
    def initial_lambda(self) -> float:
        return min(self.lambda0, self.lambda_max)

    def sampled_solver(self) -> SampledSolver:
        """Alg. 3's settings as :func:`~trainables.families.self_paced.solve_weights` takes them (γ, sweeps, block, P,
        K): one place for the family's w-step and the benchmarks that time it."""
        return {
            "gamma": self.gamma,
            "sweeps": self.solver_sweeps,
            "block": self.solver_block,
            "p": self.solver_p,
            "k": self.solver_k,
        }


@dataclass(frozen=True)
class BSPMLParams(SPMSParams):
    """SPMS plus the balance regulariser of Eq. 6.

    Args:
        mu: μ, weight of the class-balance term of Eq. 6 (G_b of Eq. 8). The paper sets μ = λ∞.
    """

    mu: NonNegative = 3.0

    @property
    def balance(self) -> float:
        return self.mu


class SPMSRules(FamilyRules):
    name = "spms"
    Params: ClassVar[type] = SPMSParams
    metric_names: ClassVar[tuple[str, ...]] = (
        names.LAMBDA,
        names.MAW,
        names.SDAW,
        names.W_Q10,
        names.W_Q50,
        names.W_Q90,
        names.EXCLUDED_SHARE,
        names.NOISE_AUROC,
        names.NOISE_PRECISION,
        names.NOISE_RECALL,
        names.W_OBJECTIVE_BEFORE,
        names.W_OBJECTIVE_AFTER,
        names.W_RESIDUAL,
        names.W_SWEEPS,
        names.LAMBDA_ABSOLUTE,
    )

    @classmethod
    def check_spec(cls, params: Any, extremes: dict[str, list[Any]]) -> None:
        """λ0 ≤ λ∞ (Alg. 1): an error for fixed values or disjoint ranges; a sampled λ0 above λ∞ is capped."""
        low0, high_max = min(extremes["lambda0"]), max(extremes["lambda_max"])
        if low0 > high_max:
            raise ValueError(
                f"lambda0 <= lambda_max must hold for some trial, but got lambda0 >= {low0}, lambda_max <= {high_max}"
            )


class BSPMLRules(SPMSRules):
    """BSPML: SPMS plus the class-balance regulariser (μ)."""

    name = "bspml"
    Params: ClassVar[type] = BSPMLParams

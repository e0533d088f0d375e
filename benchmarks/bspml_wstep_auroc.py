"""Does the loop's BSPML w-step reach the subproblem's optimum? Noise AUROC of the weights, per w-step.

    PYTHONPATH=$PWD python benchmarks/bspml_wstep_auroc.py [--spec search_spaces/bspml_glyphs.yaml]
        [--epochs 3] [--seeds 0 1 2] [--set params.solver=stochastic --set params.solver_init=warm]

Trains one trial (the spec's fixed params and the family's defaults for the searched ones, no validation folds)
and, after every w-step, scores against the recorded noise: the loop's weights, and the minimiser of the same
subproblem (ξ of that epoch, same λ, μ) found by an independent solver (scipy's L-BFGS-B from the all-ones start,
tight tolerances); prints both AUROCs, the w-step's residual and sweeps, and ξ's own AUROC (ξ⁺ + ξ⁻ as a score).
``--set params.solver=stochastic --set params.solver_init=warm`` is the earlier w-step (Alg. 3 as
written, 20 sweeps of γ = 5 on 1,024-weight blocks, warm-started). Prints numbers, never pass/fail.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from harness.wstep_reference import lbfgsb_weights
from study.intake.spec_reader import load_spec
from trainables.families.bspml.loss import BSPMLFamily
from trainables.families.self_paced import WeightProblem, denoising_objective, ms_terms
from trainables.loop import TrialRun


def run(spec_path: str, overrides: list[str], seed: int, epochs: int) -> None:
    spec = load_spec(
        spec_path,
        [
            *overrides,
            f"seed={seed}",
            f"train.epochs={epochs}",
            "validation.kind=none",
            "search.metric=test/recall_at_1",
        ],
    )
    trial = TrialRun.build(spec)  # validation.kind=none: one member, test/ every epoch
    fam = trial.member.family  # its w-step is observed below
    assert isinstance(fam, BSPMLFamily)
    noisy = np.asarray(trial.member.data.train.noisy_mask)
    step = fam.weight_step

    def observed(embeddings: torch.Tensor) -> None:
        step(embeddings)
        prm = fam.params
        xp, xn = ms_terms(embeddings, fam.index.labels, prm.ms_alpha, prm.ms_beta, prm.ms_base, prm.chunk_size)
        problem = WeightProblem(xp.double(), xn.double(), fam.index, fam.lam_absolute, prm.balance)
        optimum = lbfgsb_weights(problem, torch.ones(xp.numel(), dtype=torch.float64))
        rep = fam.report
        assert rep is not None, "the w-step reports what it solved"
        rounds, lam_used, weights = (fam.get_buffer(b) for b in ("rounds", "lam_used", "weights"))
        print(
            f"seed {seed} round {int(rounds)} λ {float(lam_used):.3f}: weights AUROC "
            f"{roc_auc_score(noisy, 1 - weights.cpu().numpy()):.3f}, optimum {roc_auc_score(noisy, 1 - optimum.numpy()):.3f}, "
            f"ξ {roc_auc_score(noisy, (xp + xn).cpu().numpy()):.3f}; Eq. 6 {rep.objective_before:.3f} → "
            f"{rep.objective_after:.3f} (optimum {float(denoising_objective(problem, optimum)):.3f}), "
            f"residual {rep.residual:.1e}, sweeps {rep.sweeps}, MAW {float(weights.mean()):.3f}",
            flush=True,
        )

    fam.weight_step = observed  # type: ignore[method-assign]
    for _ in range(epochs):
        metrics = trial.run_epoch()
    print(f"seed {seed}: test recall_at_1 {metrics['test/recall_at_1']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="search_spaces/bspml_glyphs.yaml")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        run(args.spec, args.overrides, seed, args.epochs)


if __name__ == "__main__":
    main()

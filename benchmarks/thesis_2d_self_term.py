"""The thesis' 2-D experiment (§4.1) for N-pair and L_Pos with and without Eq. 23's self-term, in-process.

    PYTHONPATH=$PWD python benchmarks/thesis_2d_self_term.py [--seeds 0 1 2] [--epochs 50]

Each condition is ``search_spaces/thesis_2d.yaml`` with ``params.loss`` / ``tau_plus`` / ``self_term`` set,
trained by the loop (no Ray, no tracking); prints the held-out ``paired_cosine`` and ``paired_mae`` of the last
epoch per seed, and their mean ± sample std. Numbers only, never pass/fail.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from study.intake.spec_reader import load_spec
from trainables.loop import TrialRun

CONDITIONS = {
    "npair": ["params.loss=npair"],
    "L_Pos, self-term, τ⁺=0.1": ["params.loss=debiased_pos", "params.tau_plus=0.1"],
    "L_Pos, no self-term, τ⁺=0.1": ["params.loss=debiased_pos", "params.tau_plus=0.1", "params.self_term=false"],
    "L_Pos, no self-term, τ⁺=0.03": ["params.loss=debiased_pos", "params.tau_plus=0.03", "params.self_term=false"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--cache", default="runs/flows2d_cache")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, sets in CONDITIONS.items():
        cos, mae = [], []
        for seed in args.seeds:
            spec = load_spec(
                "search_spaces/thesis_2d.yaml",
                [*sets, f"seed={seed}", f"train.epochs={args.epochs}", f"dataset.root={args.cache}"],
            )
            trial = TrialRun.single(spec)
            for _ in range(args.epochs):
                metrics = trial.run_epoch()
            cos.append(metrics["test/paired_cosine"])
            mae.append(metrics["test/paired_mae"])
            print(f"{name} seed {seed}: cosine {cos[-1]:.3f} MAE {mae[-1]:.3f}", flush=True)
        sd = statistics.stdev(cos) if len(cos) > 1 else 0.0
        print(f"== {name}: cosine {statistics.mean(cos):.3f} ± {sd:.3f}, MAE {statistics.mean(mae):.3f}", flush=True)


if __name__ == "__main__":
    main()

"""How MAW moves with the age λ and SDAW with the balance weight μ (BSPML Figs. 3-4 on digits), in-process.

Each cell trains ``bspml`` with λ held fixed (``lambda0 = lambda_max = λ``, growth 1) and the given μ on digits
with per-class label noise, and prints the final MAW, SDAW (Eq. 14), recall_at_1 and noise_auroc.

    PYTHONPATH=$PWD python benchmarks/bspml_maw_sdaw.py [--lambdas 1 2 4] [--mus 0 3 10] [--ratio 0.3] [--epochs 8]
"""

from __future__ import annotations

import argparse

import torch

from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.schema.metric_names import MAW, NOISE_AUROC, OBJECTIVE, SDAW, on_test


def final_metrics(lam: float, mu: float, ratio: float, epochs: int, seed: int) -> dict[str, float]:
    spec = parse_spec(
        {
            "name": "bench",
            "family": "bspml",
            "seed": seed,
            "params": {"lambda0": lam, "lambda_max": lam, "lambda_growth": 1.0, "mu": mu},
            "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": ratio, "seed": seed}},
            "train": {
                "epochs": epochs,
                "classes_per_batch": 5,
                "samples_per_class": 8,
                "optimizer": {"name": "adam", "lr": 1e-3},
            },
        }
    )
    trial = TrialRun.single(spec)
    for _ in range(epochs - 1):
        trial.run_epoch()
    return trial.run_epoch()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--mus", type=float, nargs="+", default=[0.0, 3.0, 10.0])
    ap.add_argument("--ratio", type=float, default=0.3)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    mus = " / ".join(f"{m:g}" for m in args.mus)
    print(f"## bspml on digits, per-class noise {args.ratio}, {args.epochs} epochs, seed {args.seed}, λ fixed")
    print(f"| λ | MAW μ={mus} | SDAW μ={mus} | recall_at_1 μ={mus} | noise_auroc μ={mus} |")
    print("|---|---|---|---|---|")
    for lam in args.lambdas:
        cells = [final_metrics(lam, mu, args.ratio, args.epochs, args.seed) for mu in args.mus]

        def row(name: str, fmt: str) -> str:
            return " / ".join(format(c[name], fmt) for c in cells)

        print(
            f"| {lam:g} | {row(MAW, '.3f')} | {row(SDAW, '.4f')} | {row(on_test(OBJECTIVE), '.3f')} | {row(NOISE_AUROC, '.3f')} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Closing-note numbers for the loss families, in-process on the shared loop (no Ray).

1. Every family on digits with 20 % uniform label noise, one trial each, the same budget:
   final recall_at_1, nmi, spectral_decay, mean epoch time.
2. Triplet random vs fixed semi-hard (and marginal) over noise ratios, each with its topline
   (``dataset.subset: clean_only``): final recall_at_1, noisy/topline ratio, mean eta_hat over epochs.

    PYTHONPATH=$PWD python benchmarks/baselines_noise.py [--epochs 8] [--seeds 0] [--skip-families] [--skip-mining]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch

from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.schema.metric_names import (
    EPOCH_TIME,
    ETA_HAT,
    MINER_CORRUPT_NEG_SHARE,
    NMI,
    OBJECTIVE,
    P_BOUND_TRIPLET,
    SPECTRAL_DECAY,
    on_test,
)

FAMILIES = [
    "ms",
    "contrastive",
    "triplet",
    "triplet_smooth",
    "margin",
    "marginal",
    "fastap",
    "proxy_anchor",
    "snr",
    "rdml",
    "npair",
    "debiased_neg",
    "debiased_pos",
    "diva",
]
#: Digits-sized settings where a paper default is for another scale (DiVA's rho is tuned for 128-d heads).
FAMILY_PARAMS: dict[str, dict[str, Any]] = {"diva": {"rho": 5.0, "queue_size": 512}}


def run(family: str, epochs: int, ratio: float, seed: int, subset: str = "all", **params) -> dict[str, float]:
    spec = parse_spec(
        {
            "name": "bench",
            "family": family,
            "seed": seed,
            "params": params,
            "dataset": {"name": "digits", "noise": {"kind": "uniform", "ratio": ratio, "seed": seed}, "subset": subset},
            "train": {
                "epochs": epochs,
                "classes_per_batch": 5,
                "samples_per_class": 8,
                "optimizer": {"name": "adam", "lr": 1e-3},
            },
        }
    )
    trial = TrialRun.single(spec)  # one model on all training classes, test/ every epoch
    history = [trial.run_epoch() for _ in range(epochs)]
    last = history[-1]
    out = {
        OBJECTIVE: last[on_test(OBJECTIVE)],
        NMI: last[on_test(NMI)],
        SPECTRAL_DECAY: last[on_test(SPECTRAL_DECAY)],
        EPOCH_TIME: statistics.mean(h[EPOCH_TIME] for h in history),
    }
    for name in (ETA_HAT, MINER_CORRUPT_NEG_SHARE, P_BOUND_TRIPLET):
        if name in last:
            out[name] = statistics.mean(h[name] for h in history)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.2, 0.4, 0.6])
    ap.add_argument("--skip-families", action="store_true")
    ap.add_argument("--skip-mining", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)

    if not args.skip_families:
        print(f"## families, digits, uniform noise 0.2, {args.epochs} epochs, seed {args.seeds[0]}")
        print("| family | recall_at_1 | nmi | spectral_decay | epoch_time_s | eta_hat |")
        print("|---|---|---|---|---|---|")
        for family in FAMILIES:
            m = run(family, args.epochs, 0.2, args.seeds[0], **FAMILY_PARAMS.get(family, {}))
            eta = f"{m[ETA_HAT]:.2f}" if ETA_HAT in m else "-"
            print(
                f"| {family} | {m[OBJECTIVE]:.3f} | {m[NMI]:.3f} | {m[SPECTRAL_DECAY]:.3f} | {m[EPOCH_TIME]:.2f} | {eta} |",
                flush=True,
            )
    if args.skip_mining:
        return

    print(f"\n## semi-hard mining vs noise, {args.epochs} epochs, seeds {args.seeds} (mean)")
    print(
        "| arm | p | recall_at_1 noisy | recall_at_1 topline | noisy/topline | eta_hat | miner_corrupt_neg_share | p_bound_triplet |"
    )
    print("|---|---|---|---|---|---|---|---|")
    arms = [
        ("triplet random_semihard", "triplet", {"mining": "random_semihard"}),
        ("triplet fixed_semihard", "triplet", {"mining": "fixed_semihard"}),
        ("marginal (random semi-hard)", "marginal", {}),
    ]
    for label, family, params in arms:
        for p in args.ratios:
            noisy = [run(family, args.epochs, p, s, **params) for s in args.seeds]
            top = [run(family, args.epochs, p, s, subset="clean_only", **params) for s in args.seeds] if p else noisy
            r_noisy = statistics.mean(m[OBJECTIVE] for m in noisy)
            r_top = statistics.mean(m[OBJECTIVE] for m in top)

            def avg(name: str) -> str:
                vals = [m[name] for m in noisy if name in m]
                return f"{statistics.mean(vals):.3f}" if vals else "-"

            print(
                f"| {label} | {p:.1f} | {r_noisy:.3f} | {r_top:.3f} | {r_noisy / r_top:.3f} | {avg(ETA_HAT)} | "
                f"{avg(MINER_CORRUPT_NEG_SHARE)} | {avg(P_BOUND_TRIPLET)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

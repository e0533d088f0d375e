"""Label noise on the embedded ``glyphs`` dataset: ms vs spms vs bspml vs the topline, in-process (no Ray).

Trains each family with the small_cnn backbone on all training classes for every noise kind × ratio × seed
and prints a markdown table of the final test Recall@1 (mean ± std over seeds) and the wall time per run.
The topline arm is ``ms`` trained only on the samples the noise did not touch (``dataset.subset: clean_only``).

    PYTHONPATH=$PWD python benchmarks/glyphs_noise.py [--epochs 6] [--seeds 0 1 2] \
        [--ratios 0 0.1 0.2 0.3 0.4] [--kinds per_class uniform] [--families ms spms bspml topline]

Runs without noise are shared: the kind does not matter at p=0, and the topline at p=0 is ms. ``--jobs N``
runs N single-thread runs at a time in separate processes (wall times then depend on the machine's load).
``--glyphs key=value`` overrides a field of ``trainables.data.glyphs.GlyphsConfig`` (for tuning the generator),
``--set key=value`` a training setting or family parameter below (values parsed as YAML).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import multiprocessing
import statistics
import time
from typing import Any

import torch
import yaml

from study.intake.spec_reader import parse_spec
from trainables.data import glyphs
from trainables.loop import TrialRun
from trainables.schema.metric_names import OBJECTIVE, on_test

#: The training setup the numbers are for (the shipped glyphs specs should use the same).
TRAIN: dict[str, Any] = {
    "classes_per_batch": 8,
    "samples_per_class": 4,
    "batches_per_epoch": None,
    "optimizer": {"name": "adam", "lr": 1e-3},
    "eval_batch_size": 256,
    "recall_at": [1],
}
EMBEDDING_DIM = 64
#: Shared fixed params (bspml_compare_digits.yaml); each family takes the ones it has.
PARAMS: dict[str, Any] = {
    "ms_alpha": 2.0,
    "ms_beta": 50.0,
    "ms_base": 1.0,
    "ms_epsilon": 0.1,
    "lambda0": 1.0,
    "lambda_growth": 1.1,
    "lambda_max": 3.0,
    "mu": 3.0,
}
FAMILY_KEYS = {
    "ms": {"ms_alpha", "ms_beta", "ms_base", "ms_epsilon"},
    "spms": {"ms_alpha", "ms_beta", "ms_base", "ms_epsilon", "lambda0", "lambda_growth", "lambda_max"},
    "bspml": {"ms_alpha", "ms_beta", "ms_base", "ms_epsilon", "lambda0", "lambda_growth", "lambda_max", "mu"},
}


def _recall_at_1(metrics: dict[str, float]) -> float:
    return metrics[on_test(OBJECTIVE)]


def build_spec(family: str, kind: str, ratio: float, seed: int, epochs: int, params: dict, train: dict):
    loss_family = "ms" if family == "topline" else family
    spec = {
        "name": "glyphs_noise",
        "family": loss_family,
        "seed": seed,
        "params": {k: v for k, v in params.items() if k in FAMILY_KEYS.get(loss_family, params.keys())},
        "dataset": {
            "name": "glyphs",
            "noise": {"kind": kind if ratio > 0 else "none", "ratio": ratio, "seed": seed},
            "subset": "clean_only" if family == "topline" else "all",
        },
        "model": {"backbone": "small_cnn", "embedding_dim": EMBEDDING_DIM},
        "train": {**train, "epochs": epochs},
    }
    # Test metrics straight from the trial: no class-disjoint validation (``validation.kind: none``); a spec
    # schema without that section (metric still named ``recall_at_1``) takes the plain spec.
    try:
        return parse_spec({**spec, "validation": {"kind": "none"}, "search": {"metric": "test/recall_at_1"}})
    except ValueError:  # SpecError
        return parse_spec(spec)


def run(
    family: str, kind: str, ratio: float, seed: int, epochs: int, params: dict, train: dict
) -> tuple[list[float], float]:
    """Test Recall@1 after every epoch, and the wall time of the whole run (build, every epoch and evaluation)."""
    start = time.perf_counter()
    trial = TrialRun.single(build_spec(family, kind, ratio, seed, epochs, params, train))
    curve = [_recall_at_1(trial.run_epoch()) for _ in range(epochs)]
    return curve, time.perf_counter() - start


def _job(job: tuple) -> tuple[tuple, list[float], float]:
    """One run in a worker process: one thread, the parent's generator overrides."""
    key: tuple[str, str, float, int]
    key, epochs, params, train, glyph_overrides, threads = job
    torch.set_num_threads(threads)
    if glyph_overrides:
        glyphs.DEFAULT_CONFIG = dataclasses.replace(glyphs.DEFAULT_CONFIG, **glyph_overrides)
    curve, wall = run(*key, epochs, params, train)
    return key, curve, wall


def _unique_key(family: str, kind: str, ratio: float, seed: int) -> tuple[str, str, float, int]:
    # Without noise the kind does not matter, and the topline (clean samples only) is ms on all samples.
    if ratio == 0:
        return ("ms" if family == "topline" else family, "none", 0.0, seed)
    return (family, kind, ratio, seed)


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = yaml.safe_load(value)
    return out


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.4])
    ap.add_argument("--kinds", nargs="+", default=["per_class", "uniform"], choices=["per_class", "uniform"])
    ap.add_argument(
        "--families", nargs="+", default=["ms", "spms", "bspml", "topline"], choices=["ms", "spms", "bspml", "topline"]
    )
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override a family param (e.g. lambda_max=5) or a train setting (e.g. train.optimizer.lr=3e-3)",
    )
    ap.add_argument("--glyphs", nargs="*", default=[], metavar="KEY=VALUE", help="override a GlyphsConfig field")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process")
    ap.add_argument("--every-epoch", action="store_true", help="a table after every epoch, not only the last")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    glyph_overrides: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in _parse_overrides(args.glyphs).items()
    }
    if glyph_overrides:
        glyphs.DEFAULT_CONFIG = dataclasses.replace(glyphs.DEFAULT_CONFIG, **glyph_overrides)
    params, train = dict(PARAMS), {**TRAIN, "optimizer": dict(TRAIN["optimizer"])}
    for key, value in _parse_overrides(args.set).items():
        if key.startswith("train."):
            *path, leaf = key.split(".")[1:]
            node: dict[str, Any] = train
            for p in path:
                node = node[p]
            node[leaf] = value
        else:
            params[key] = value
    cfg = glyphs.DEFAULT_CONFIG
    print(f"glyphs: {cfg}")
    print(f"train: {train}, epochs {args.epochs}, embedding_dim {EMBEDDING_DIM}, small_cnn, {args.threads} thread(s)")
    print(f"params: {params}")

    cells = [(f, k, r, s) for k in args.kinds for r in args.ratios for f in args.families for s in args.seeds]
    keys = list(dict.fromkeys(_unique_key(*c) for c in cells))
    jobs = [(key, args.epochs, params, train, glyph_overrides, args.threads) for key in keys]
    runs: dict[tuple, list[float]] = {}
    times: list[float] = []

    def record(key: tuple, curve: list[float], wall: float) -> None:
        runs[key] = curve
        times.append(wall)
        family, kind, ratio, seed = key
        print(
            f"  {family:8s} {kind:9s} p={ratio:.1f} seed={seed}: R@1 {curve[-1]:.3f}  ({wall:.1f} s)  "
            f"per epoch: {' '.join(f'{c:.3f}' for c in curve)}",
            flush=True,
        )

    if args.jobs > 1:  # independent single-thread processes, for a machine with more cores
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
            for done, curve, wall in pool.map(_job, jobs):
                record(done, curve, wall)
    else:
        for job in jobs:
            record(*_job(job))

    epochs_to_show = range(1, args.epochs + 1) if args.every_epoch else [args.epochs]
    for epoch in epochs_to_show:
        print(
            f"\n## test Recall@1, glyphs, mean ± std over seeds {args.seeds}, after {epoch} of {args.epochs} epochs\n"
        )
        print("| family | noise | " + " | ".join(f"p={r:g}" for r in args.ratios) + " |")
        print("|" + "---|" * (2 + len(args.ratios)))
        for family in args.families:
            for kind in args.kinds:
                row = [
                    _fmt([runs[_unique_key(family, kind, r, s)][epoch - 1] for s in args.seeds]) for r in args.ratios
                ]
                print(f"| {family} | {kind} | " + " | ".join(row) + " |")
    print(
        f"\nwall time per run: mean {statistics.mean(times):.1f} s, max {max(times):.1f} s "
        f"({len(times)} runs, {args.threads} thread(s) each, {args.jobs} at a time)"
    )


if __name__ == "__main__":
    main()

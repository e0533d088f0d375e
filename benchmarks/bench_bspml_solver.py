"""How much the BSPML w-step (Alg. 3) costs: as a share of a digits epoch, and at SOP scale.

    PYTHONPATH=$PWD python benchmarks/bench_bspml_solver.py [--rows 2048] [--sizes 30000 60000] [--threads 1]

Prints ratios, never pass/fail. The w-step has two parts:
- ξ⁺/ξ⁻ of Eq. 3 (``ms_terms``): one chunked N×N similarity pass, O(N²·D). At SOP scale on a CPU this is
  timed on ``--rows`` anchor rows against all N columns and scaled by N/rows (the chunks are independent and
  identical in cost; the extrapolation is printed as such).
- the coordinate solver (``solve_weights``, Eq. 8): O(sweeps·N·P·K), timed in full.
Runs on the GPU when there is one (the trial's device), else on the CPU with the threads torch has.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from trainables.families.bspml.loss import BSPMLFamily, BSPMLParams
from trainables.families.self_paced import ClassIndex, WeightProblem, ms_terms, solve_weights


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - start, out


def digits_share() -> None:
    from study.intake.spec_reader import parse_spec
    from trainables.loop import TrialRun

    spec = parse_spec(
        {
            "name": "bench",
            "family": "bspml",
            "dataset": {"name": "digits", "noise": {"kind": "per_class", "ratio": 0.2, "seed": 0}},
            "train": {"epochs": 3, "classes_per_batch": 5, "samples_per_class": 8},
        }
    )
    trial = TrialRun.single(spec).member  # the member: its θ-epoch, embedding pass and w-step are timed apart
    family = trial.family
    assert isinstance(family, BSPMLFamily)
    trial.train_epoch()  # warm-up
    epoch_s, _ = _timed(trial.train_epoch, trial.device)
    embed_s, emb = _timed(lambda: trial.embed(trial.data.train), trial.device)
    step_s, _ = _timed(lambda: family.weight_step(emb), trial.device)
    print(
        f"digits (N={len(trial.data.train)}, {trial.device.type}): θ-epoch {epoch_s:.3f}s, "
        f"embed train {embed_s:.3f}s, w-step {step_s:.3f}s = {100 * step_s / epoch_s:.1f}% of the epoch "
        f"({100 * (step_s + embed_s) / epoch_s:.1f}% with the embedding pass)"
    )


def sop_scale(sizes: list[int], classes: int, dim: int, rows: int, device: torch.device) -> None:
    prm = BSPMLParams()
    print(
        f"\nrandom {dim}-d embeddings, {classes} classes, {device.type}, "
        f"solver: {prm.solver_sweeps} sweeps × blocks of {prm.solver_block}, P={prm.solver_p} K={prm.solver_k}"
    )
    results = []
    for n in sizes:
        g = torch.Generator(device=device).manual_seed(0)
        emb = F.normalize(torch.randn(n, dim, device=device, generator=g), dim=1)
        labels = torch.randint(0, classes, (n,), device=device, generator=g)
        part = min(rows, n)
        if part == n:
            xi_s, _ = _timed(lambda: ms_terms(emb, labels, 2.0, 50.0, 1.0, prm.chunk_size), device)
        else:
            xi_s, _ = _timed(lambda: _rows_against_all(emb, labels, part, prm.chunk_size), device)
        xi_full = xi_s * n / part
        xi_pos = torch.rand(n, device=device, generator=g) * 3
        xi_neg = torch.rand(n, device=device, generator=g) * 0.1
        problem = WeightProblem(xi_pos, xi_neg, ClassIndex.build(labels), 3.0, 3.0)
        solve_s, w = _timed(
            lambda: solve_weights(problem, torch.ones(n, device=device), **prm.sampled_solver(), generator=g),
            device,
        )
        assert float(w.min()) >= 0 and float(w.max()) <= 1
        results.append((n, xi_full, solve_s))
        how = f"extrapolated from {part} rows" if part < n else "full"
        print(f"N={n:>6}: ξ terms {xi_full:7.1f}s ({how}), solver {solve_s:6.2f}s")
    if len(results) >= 2:
        (n0, x0, s0), (n1, x1, s1) = results[0], results[-1]
        print(
            f"growth N×{n1 / n0:.1f}: ξ terms ×{x1 / x0:.2f} (O(N²) expected ×{(n1 / n0) ** 2:.1f}), "
            f"solver ×{s1 / s0:.2f} (O(N) expected ×{n1 / n0:.1f})"
        )


def _rows_against_all(emb: torch.Tensor, labels: torch.Tensor, rows: int, chunk: int) -> None:
    """The work ``ms_terms`` does for ``rows`` anchors: their similarities to all N samples, both ξ."""
    from trainables.families.self_paced import log1p_sum_exp

    for lo in range(0, rows, chunk):
        hi = min(lo + chunk, rows)
        sim = emb[lo:hi] @ emb.T
        same = labels[lo:hi, None] == labels[None, :]
        log1p_sum_exp(-2.0 * (sim - 1.0), same)
        log1p_sum_exp(50.0 * (sim - 1.0), ~same)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30000, 60000])
    parser.add_argument("--classes", type=int, default=11318)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--rows", type=int, default=2048, help="anchor rows timed for ξ on a CPU (all on a GPU)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (a trial uses resources.cpu; more threads than free cores thrash)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    print(f"torch threads: {torch.get_num_threads()}")
    digits_share()
    sop_scale(args.sizes, args.classes, args.dim, args.rows if device.type == "cpu" else max(args.sizes), device)


if __name__ == "__main__":
    main()

"""The benchmark suite in one run: study vs bare loop (total, per trial, start-up), 2-concurrent scaling, evaluation
vs the faiss floor and PML's AccuracyCalculator, each loss family vs its PML counterpart, and the BSPML w-step.

    PYTHONPATH=$PWD python -m benchmarks [--quick] [--repeats 5] [--skip study]

Prints medians and min-max of the repeats and the ratios; never pass/fail. ``--quick`` is a smoke run (tiny sizes,
2 repeats, a 2 x 1 study). Timings on a shared machine are noisy: the study figures interleave their repeats (bare,
study, 2-concurrent study, bare, ...) so that load slows each alike, and the ratios are per repeat.
The GPU benchmarks are ``python -m benchmarks.gpu`` (they need CUDA).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

SECTIONS = ("study", "components")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes and 2 repeats: a smoke run")
    p.add_argument("--repeats", type=int, default=None, help="repeats per figure (default 5; quick: 2)")
    p.add_argument("--trials", type=int, default=4, help="trials of the digits study (quick: 2)")
    p.add_argument("--epochs", type=int, default=4, help="epochs per trial (quick: 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the component benchmarks (a 1-cpu trial)")
    p.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="leave a section out (repeatable)")
    args = p.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    trials, epochs = (2, 1) if args.quick else (args.trials, args.epochs)
    start = time.perf_counter()
    print(
        f"benchmarks: {platform.node()} python {platform.python_version()}, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.1f} at start; {repeats} repeats{' (quick)' if args.quick else ''}"
    )
    print(f"command: python -m benchmarks {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    if "components" not in args.skip:
        import torch

        from benchmarks import components

        torch.set_num_threads(args.threads)
        components.run(args.quick, repeats, emit=lambda line: print(line, flush=True))
    if "study" not in args.skip:
        from benchmarks import study_overhead

        result = study_overhead.compare(repeats, trials, epochs, concurrency=True)
        print("\n".join(study_overhead.report(result, trials, epochs)), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end; suite took {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

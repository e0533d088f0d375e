"""Kill a study's driver with SIGKILL at a random point, resume it, check it; repeat. Prints passes/runs.

    PYTHONPATH=$PWD python benchmarks/kill_resume.py [--repeats 10] [--seed 0] [--batches-per-epoch 4]

The check is ``tests/study/test_resume.py::check_resumed`` (exactly N trials in Ray, Optuna and MLflow, one
child run per trial, none RUNNING, every metric history exactly epochs 1..E).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
import traceback
from pathlib import Path

from harness.kill_resume import EPOCHS, NUM_TRIALS, check_resumed, kill_and_resume, restarted_rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batches-per-epoch", type=int, default=4)
    args = p.parse_args()
    rng = random.Random(args.seed)
    passed = 0
    for i in range(args.repeats):
        kill_after, delay = rng.randint(0, NUM_TRIALS * EPOCHS - 1), round(rng.uniform(0.0, 2.0), 2)
        workdir = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))
        start = time.perf_counter()
        try:
            out = kill_and_resume(workdir, kill_after, delay, batches_per_epoch=args.batches_per_epoch)
            check_resumed(out)
            passed += 1
            verdict = f"pass (trials resumed from a checkpoint: {restarted_rows(out['study_dir'])})"
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            verdict = f"FAIL {type(e).__name__}: {str(e)[-1500:]}"
            traceback.print_exc()
            out = {}
        print(
            f"run {i}: kill after {kill_after} epochs + {delay} s (epochs logged at kill: "
            f"{out.get('epochs_at_kill')}) {time.perf_counter() - start:.0f} s: {verdict}",
            flush=True,
        )
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"kill/resume: {passed}/{args.repeats} passed")


if __name__ == "__main__":
    main()

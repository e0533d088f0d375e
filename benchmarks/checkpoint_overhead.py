"""What checkpointing every epoch costs a digits trial: one trial, E epochs, checkpoint every epoch vs.
only at the last (``train.checkpoint_every=E``). Prints both trial times (Ray's ``time_total_s``, which
excludes driver and Ray start-up) and their ratio.

    PYTHONPATH=$PWD python benchmarks/checkpoint_overhead.py [--epochs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from trainables.schema import record as R


def trial_time(epochs: int, every: int) -> tuple[float, float]:
    """(trial seconds, seconds inside tune.report/checkpointing estimated as total − Σ epoch/eval time)."""
    work = Path(tempfile.mkdtemp(prefix="ck", dir="/tmp"))
    spec = {
        "name": "ckpt",
        "family": "ms",
        "dataset": {"name": "digits"},
        "train": {"epochs": epochs, "classes_per_batch": 5, "samples_per_class": 4, "checkpoint_every": every},
        "search": {"num_trials": 1, "space": {"ms_alpha": {"type": "float", "low": 2.0, "high": 2.0001}}},
    }
    (work / R.SPEC_FILE).write_text(yaml.safe_dump(spec))
    env = {**os.environ, "RAY_TMPDIR": str(work / "r")}
    env.pop("RAY_ADDRESS", None)
    (work / "r").mkdir()
    try:
        subprocess.run(
            [sys.executable, "-m", "study.run", R.SPEC_FILE],
            cwd=work,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        (trial_dir,) = (work / R.DEFAULT_STORAGE / "ckpt" / R.SEARCH_EXPERIMENT).glob("trial_*")
        rows = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line]
        total = rows[-1]["time_total_s"]
        compute = sum(r["epoch_time_s"] + r["eval_time_s"] for r in rows)
        return total, total - compute
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    args = p.parse_args()
    every, every_other = trial_time(args.epochs, 1)
    last, last_other = trial_time(args.epochs, args.epochs)
    print(
        f"digits trial, {args.epochs} epochs: checkpoint every epoch {every:.2f} s "
        f"(outside train/eval {every_other:.2f} s), only the last {last:.2f} s (outside {last_other:.2f} s); "
        f"ratio {every / last:.3f}"
    )


if __name__ == "__main__":
    main()

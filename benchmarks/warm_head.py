"""Cold start against the warm head: the 4 x 4 ``ms_digits`` study of docs/notebook/performance.md started on its own private
Ray (cold) and attached to a warm head (``dmlstudy up``, then ``--address warm``), with the bare loop beside them.

Each repeat runs the bare loop, the cold study and the warm study, in that order, so that a busy machine slows all
three alike; the warm head is started once before the first repeat (its ``up`` is timed apart) and serves every warm
study. A study's trial still starts a worker process of its own (Ray Tune's trainable actors carry a runtime
environment, so Ray never hands them the head's prestarted workers): the warm head saves the instance's start and
shutdown, not the worker's torch import. The per-repeat warm lines show whether the first studies on a new head
differ from the later ones.

The measures are :mod:`benchmarks.study_overhead`'s: ``startup`` (process start to the first trial's start),
``total`` (to the process's exit), per trial and platform time per trial, from the study's own stores.

    PYTHONPATH=$PWD python -m benchmarks.warm_head [--repeats 4] [--trials 4] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.study_overhead import REPO, SPEC, _env, fmt, run_bare, study_overrides, summarize, timed_study
from study.runtime import warm_head

__all__ = ["run_study", "compare", "report"]


def run_study(trials: int, epochs: int, head: Path | None) -> dict[str, float]:
    """One study command, timed: on a private Ray (``head`` None) or attached to the warm head whose state is in
    ``head`` (``--address warm``)."""
    work = Path(tempfile.mkdtemp(prefix="bench_warm", dir="/tmp"))
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = _env(ray_tmp)
    args = [sys.executable, "-m", "study.run", str(SPEC), "--no-dashboard", f"--set=storage={work}"]
    args += [f"--set={o}" for o in study_overrides(trials, epochs)]
    if head is not None:
        env[warm_head.HEAD_DIR_ENV] = str(head)
        args += ["--address", warm_head.WARM_ADDRESS]
    try:
        t0 = time.time()
        proc = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True)
        return timed_study(proc, (t0, time.time()), work, (trials, 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _up(head: Path) -> float:
    """``dmlstudy up`` with its state in ``head``; its seconds."""
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "study.commands.head", "up"],
        cwd=REPO,
        env={**_env(tempfile.gettempdir()), warm_head.HEAD_DIR_ENV: str(head)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or proc.stdout.splitlines()[-1:] != [warm_head.ATTACH_LINE]:
        raise RuntimeError(f"dmlstudy up failed:\n{proc.stdout}\n{proc.stderr}")
    return time.time() - t0


def compare(repeats: int, trials: int, epochs: int) -> dict[str, Any]:
    """Interleaved repeats of bare loop, cold study and warm study on one head started before them."""
    head = Path(tempfile.mkdtemp(prefix="bench_head", dir="/tmp"))
    rows: dict[str, list[dict[str, float]]] = {"bare": [], "cold": [], "warm": []}
    try:
        up_s = _up(head)
        print(f"  dmlstudy up: {up_s:.1f} s", file=sys.stderr, flush=True)
        for i in range(repeats):
            rows["bare"].append(run_bare(trials, epochs))
            rows["cold"].append(run_study(trials, epochs, None))
            rows["warm"].append(run_study(trials, epochs, head))
            done = {k: (round(v[-1]["startup"], 1), round(v[-1]["total"], 1)) for k, v in rows.items()}
            print(f"  repeat {i + 1}/{repeats}: (startup, total) s {done}", file=sys.stderr, flush=True)
    finally:
        warm_head.stop_head(head)
        shutil.rmtree(head, ignore_errors=True)
    return {k: summarize(v) for k, v in rows.items()} | {"raw": rows, "up_s": up_s}


def report(result: dict[str, Any], trials: int, epochs: int) -> list[str]:
    """Lines: each measure's median [min-max], the warm runs one by one, then the ratios the goals name."""
    raw = result["raw"]
    lines = [f"cold start vs warm head: ms_digits, {trials} trials x {epochs} epochs (median [min-max])"]
    lines.append(f"  dmlstudy up (once, before the repeats)  {result['up_s']:.2f} s")
    for kind in ("bare", "cold", "warm"):
        for key in ("total", "startup", "per_trial", "platform_per_trial", "tail"):
            lines.append(fmt(f"  {kind}.{key}", result[kind][key]))
    for i, row in enumerate(raw["warm"], 1):
        lines.append(f"  warm study {i} on the head: startup {row['startup']:.2f} s, total {row['total']:.2f} s")

    def ratio(name: str, num: str, key: str) -> None:
        values = [a[key] / b[key] for a, b in zip(raw[num], raw["bare"])]
        lines.append(fmt(f"  {name}", summarize([{"r": r} for r in values])["r"], "x"))

    for kind in ("cold", "warm"):
        ratio(f"ratio {kind}/bare total", kind, "total")
        ratio(f"ratio {kind}/bare startup", kind, "startup")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--json", default=None, help="also write the raw rows here")
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} at start", file=sys.stderr, flush=True)
    result = compare(args.repeats, args.trials, args.epochs)
    print("\n".join(report(result, args.trials, args.epochs)))
    print(f"load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"raw": result["raw"], "up_s": result["up_s"]}, indent=1))


if __name__ == "__main__":
    main()

"""What the platform costs on top of training: the ``ms_digits`` study command vs a bare in-process loop.

The study is ``python -m study.run search_spaces/ms_digits.yaml`` with N trials x E epochs, one at a time (and,
for the scaling figure, two at a time), each run in a fresh temporary directory with its own ``RAY_TMPDIR``. The
bare loop is a fresh ``python`` process that imports :mod:`trainables.loop` and trains the same number of
configurations of the same spec with :class:`trainables.loop.TrialRun` (one torch thread, like a 1-cpu trial).
Both are timed from process start to exit, and repeats alternate between them so that a busy machine slows
both alike.

Timestamps of the study come from its own stores: each MLflow child run's start and end (the driver's
``on_trial_start`` / ``on_trial_complete``) and the epoch and evaluation times every trial reports. From them:

- ``startup``: process start to the first trial's start;
- ``per_trial``: (last trial end - first trial start) / N, for the study; (total - imports) / N, bare;
- ``platform_per_trial``: the study's per-trial time minus the work a trial reports (Σ epoch + eval time),
  i.e. actor start, dataset load, model build, checkpointing, reporting and the gap before the next trial;
- ``tail``: last trial end to process exit.

    PYTHONPATH=$PWD python -m benchmarks.study_overhead [--repeats 5] [--trials 4] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainables.schema import record as R

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "search_spaces" / "ms_digits.yaml"

__all__ = ["study_overrides", "run_study", "run_bare", "compare"]


def study_overrides(trials: int, epochs: int, concurrent: int = 1) -> list[str]:
    """The ``--set`` overrides of the 4 x 4 digits study (no validation folds, no final stage)."""
    return [
        f"search.num_trials={trials}",
        f"train.epochs={epochs}",
        f"search.max_concurrent={concurrent}",
        "final.seeds=0",
        "validation.kind=none",
    ]


def _env(ray_tmp: str, repo: Path = REPO) -> dict[str, str]:
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    return env


def _study_times(db: Path) -> dict[str, Any]:
    """Per child run: start/end (s since the epoch) and the Σ of its reported epoch and evaluation times."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        runs = con.execute(
            "SELECT r.run_uuid, r.start_time, r.end_time FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'dmlstudy.role' AND t.value = 'trial' ORDER BY r.start_time"
        ).fetchall()
        work = dict(
            con.execute(
                "SELECT run_uuid, sum(value) FROM metrics WHERE key IN ('epoch_time_s', 'eval_time_s') "
                "GROUP BY run_uuid"
            ).fetchall()
        )
    return {
        "starts": [r[1] / 1000 for r in runs],
        "ends": [r[2] / 1000 for r in runs],
        "work": [float(work.get(r[0], 0.0)) for r in runs],
    }


def run_study(trials: int, epochs: int, concurrent: int = 1, repo: Path = REPO) -> dict[str, float]:
    """One study command, timed; returns total, startup, per_trial, platform_per_trial, tail (seconds).

    ``repo``: the checkout whose ``study.run`` runs (another one to compare versions side by side)."""
    work = Path(tempfile.mkdtemp(prefix="bench_study", dir="/tmp"))
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        args = [sys.executable, "-m", "study.run", str(repo / SPEC.relative_to(REPO)), "--no-dashboard"]
        args.append(f"--set=storage={work}")
        args += [f"--set={o}" for o in study_overrides(trials, epochs, concurrent)]
        t0 = time.time()
        proc = subprocess.run(args, cwd=work, env=_env(ray_tmp, repo), capture_output=True, text=True)
        return timed_study(proc, (t0, time.time()), work, (trials, concurrent))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def timed_study(
    proc: subprocess.CompletedProcess[str], span_s: tuple[float, float], work: Path, size: tuple[int, int]
) -> dict[str, float]:
    """A finished study command's figures from its MLflow runs: total, startup (command → first trial), per trial,
    the platform's share per trial (trial time less its own epochs and evaluation, over ``concurrent`` slots), tail
    (last trial → exit). ``span_s``: the command's start and end; ``size``: (trials, concurrent)."""
    (t0, t1), (trials, concurrent) = span_s, size
    if proc.returncode != 0:
        raise RuntimeError(f"study failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    times = _study_times(work / "ms_digits" / R.MLFLOW_DB)
    if len(times["starts"]) != trials:
        raise RuntimeError(f"expected {trials} trial runs, found {len(times['starts'])}")
    first, last = min(times["starts"]), max(times["ends"])
    span = last - first
    return {
        "total": t1 - t0,
        "startup": first - t0,
        "per_trial": span / trials,
        "platform_per_trial": (span - sum(times["work"]) / concurrent) / trials,
        "tail": t1 - last,
        "trial_phase": span,
    }


def run_bare(trials: int, epochs: int) -> dict[str, float]:
    """The bare loop in a fresh process; returns total, imports, per_trial, platform_per_trial (seconds)."""
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.study_overhead", "--bare", f"--trials={trials}", f"--epochs={epochs}"],
        cwd=REPO,
        env=_env(tempfile.gettempdir()),
        capture_output=True,
        text=True,
    )
    t1 = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"bare loop failed:\n{proc.stderr[-3000:]}")
    inner = json.loads(proc.stdout.strip().splitlines()[-1])
    span = inner["end"] - inner["first_start"]
    return {
        "total": t1 - t0,
        "startup": inner["first_start"] - t0,
        "per_trial": span / trials,
        "platform_per_trial": (span - inner["work"]) / trials,
        "tail": t1 - inner["end"],
        "trial_phase": span,
    }


def _bare_main(trials: int, epochs: int) -> None:
    """Child process of :func:`run_bare`: build and train ``trials`` configurations of the digits study."""
    import random

    import torch

    from study.intake.spec_reader import load_spec
    from trainables.loop import TrialRun

    spec = load_spec(SPEC, study_overrides(trials, epochs))
    torch.set_num_threads(1)
    rng = random.Random(0)
    first_start = time.time()
    work = 0.0
    for i in range(trials):
        sampled = {
            name: (rng.uniform(d.low, d.high) if d.type == "float" else d.low)  # type: ignore[union-attr]
            for name, d in spec.search.space.items()
        }
        trial_spec = spec.model_copy(update={"seed": i})
        from trainables.schema.trial import resolve_trial_spec

        run = TrialRun.build(resolve_trial_spec(trial_spec, sampled))
        while run.epoch < epochs:
            m = run.run_epoch()
            work += m["epoch_time_s"] + m["eval_time_s"]
    print(json.dumps({"first_start": first_start, "end": time.time(), "work": work}))


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summarize(rows: list[dict[str, float]]) -> dict[str, tuple[float, float, float]]:
    """Per key: (median, min, max) over repeats."""
    return {k: (_median([r[k] for r in rows]), min(r[k] for r in rows), max(r[k] for r in rows)) for k in rows[0]}


def compare(
    repeats: int, trials: int, epochs: int, concurrency: bool = True, baseline: Path | None = None
) -> dict[str, Any]:
    """Interleaved repeats of bare loop, sequential study and (optionally) a 2-concurrent study; with ``baseline``
    (another checkout, e.g. ``git archive`` of an older commit) its study too, in the same repeats."""
    rows: dict[str, list[dict[str, float]]] = {"bare": [], "study": [], "study_2x": []}
    if baseline is not None:
        rows |= {"baseline": [], "baseline_2x": []}
    for i in range(repeats):
        rows["bare"].append(run_bare(trials, epochs))
        rows["study"].append(run_study(trials, epochs, 1))
        if concurrency:
            rows["study_2x"].append(run_study(trials, epochs, 2))
        if baseline is not None:
            rows["baseline"].append(run_study(trials, epochs, 1, repo=baseline))
            if concurrency:
                rows["baseline_2x"].append(run_study(trials, epochs, 2, repo=baseline))
        done = {k: round(v[-1]["total"], 1) for k, v in rows.items() if v}
        print(f"  repeat {i + 1}/{repeats}: total s {done}", file=sys.stderr, flush=True)
    return {k: summarize(v) for k, v in rows.items() if v} | {"raw": rows}


def fmt(name: str, stat: tuple[float, float, float], unit: str = "s") -> str:
    med, lo, hi = stat
    return f"{name:<34} {med:8.2f} {unit}  [{lo:.2f}-{hi:.2f}]"


def report(result: dict[str, Any], trials: int, epochs: int) -> list[str]:
    """Lines: each measure's median [min-max], then the ratios the performance goals name."""
    lines = [f"study vs bare loop: ms_digits, {trials} trials x {epochs} epochs (median [min-max])"]
    for kind in ("bare", "study", "study_2x", "baseline", "baseline_2x"):
        if kind not in result:
            continue
        for key in ("total", "startup", "per_trial", "platform_per_trial", "tail"):
            lines.append(fmt(f"  {kind}.{key}", result[kind][key]))
    raw = result["raw"]

    def ratio(name: str, num: str, den: str, key: str) -> None:
        values = [a[key] / b[key] for a, b in zip(raw[num], raw[den])]
        lines.append(fmt(f"  {name}", summarize([{"r": r} for r in values])["r"], "x"))

    for study in ("study", "baseline") if raw.get("baseline") else ("study",):
        ratio(f"ratio {study}/bare total", study, "bare", "total")
        ratio(f"ratio {study}/bare per trial", study, "bare", "per_trial")
        ratio(f"ratio {study}/bare startup", study, "bare", "startup")
        if raw.get(f"{study}_2x"):
            ratio(f"{study} 2-concurrent throughput (trials)", study, f"{study}_2x", "trial_phase")
            ratio(f"{study} 2-concurrent throughput (total)", study, f"{study}_2x", "total")
    return lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--no-concurrency", action="store_true")
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="also write the raw rows here")
    p.add_argument("--baseline", type=Path, default=None, help="another checkout whose study also runs, interleaved")
    args = p.parse_args()
    if args.bare:
        _bare_main(args.trials, args.epochs)
        return
    result = compare(args.repeats, args.trials, args.epochs, not args.no_concurrency, args.baseline)
    print("\n".join(report(result, args.trials, args.epochs)))
    if args.json:
        Path(args.json).write_text(json.dumps(result["raw"], indent=1))


if __name__ == "__main__":
    main()

"""Where a study's fixed time goes: phase timestamps of one ``study.run`` driver, start to exit.

Runs ``python -m study.run`` on the 4 x 4 digits study (as :mod:`benchmarks.study_overhead`) in a child process
whose driver functions are wrapped with timestamps (the product carries no timing code): the interpreter and
imports, ``load_spec``, the input checks, ``ray.init``, the MLflow store, the Tuner's construction, and per trial
the driver's ``on_trial_start`` / first result / complete. With the epoch and evaluation times each trial reports,
the gap from a trial's start to its first result splits into the worker's setup (actor start, imports, dataset,
model) and the epoch itself.

    PYTHONPATH=$PWD python -m benchmarks.driver_timeline [--trials 4] [--epochs 4] [--concurrent 1] [--repo DIR]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "search_spaces" / "ms_digits.yaml"

__all__ = ["timeline", "report"]

_EVENTS: list[tuple[str, float]] = []


def _mark(name: str) -> None:
    _EVENTS.append((name, time.time()))


def _wrap(name: str, *places: tuple[Any, str]) -> None:
    """Mark ``name:begin`` / ``name:end`` around the first of ``places`` (owner, attribute) that exists: the phases
    moved between modules over time, and ``--repo`` may run an older checkout."""
    for owner, attr in places:
        original = getattr(owner, attr, None)
        if original is not None:
            break
    else:
        raise AttributeError(f"none of {[f'{o.__name__}.{a}' for o, a in places]} exists: where did {name!r} go?")

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _mark(f"{name}:begin")
        try:
            return original(*args, **kwargs)
        finally:
            _mark(f"{name}:end")

    setattr(owner, attr, wrapped)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _child(argv: list[str], out: str) -> int:
    """The instrumented driver: wrap the phases, run ``study.run.main``, dump the events as JSON."""
    _mark("child:imports:begin")
    import study.commands.run as run_module
    import study.intake.spec_reader
    import study.search.driver as tuner
    import study.tracking.callback as tracking

    # The search's Tuner and the summary moved out of the driver (study/search/tuners.py, outcome.py).
    outcome: ModuleType = importlib.import_module("study.search.outcome") if _has("study.search.outcome") else tuner
    tuners: ModuleType = importlib.import_module("study.search.tuners") if _has("study.search.tuners") else tuner

    _mark("child:imports:end")
    # The spec is loaded through the run module's own name (``load_plan`` today, ``load_spec`` before the plan).
    _wrap("load_spec", (run_module, "load_plan"), (study.intake.spec_reader, "load_spec"))
    _wrap("run_study", (tuner, "run_study"))
    _wrap("ray_init", (tuner, "connect_ray"))
    _wrap("mlflow_store", (tuner, "TrackingStore"))
    # The stages import these when they run, so that wrapping the module's attribute reaches them.
    _wrap("build_tuner", (tuners, "search_tuner"))
    _wrap("summarize", (outcome, "summarize"), (tuner, "_summarize"))
    cb = tracking.MlflowTrialCallback
    for hook in ("on_trial_start", "on_trial_result", "on_trial_complete"):
        original = getattr(cb, hook)

        def hooked(self: Any, iteration: int, trials: list, trial: Any, *a: Any, _o=original, _h=hook, **k: Any):
            _mark(f"{_h}:{trial.trial_id}")
            if _h == "on_trial_result":
                result = a[0] if a else k["result"]
                _EVENTS.append((f"work:{trial.trial_id}", result.get("epoch_time_s", 0) + result.get("eval_time_s", 0)))
            return _o(self, iteration, trials, trial, *a, **k)

        setattr(cb, hook, hooked)
    import ray

    _wrap("ray_shutdown", (ray, "shutdown"))
    try:
        code = run_module.main(argv)
    finally:
        _mark("child:main:end")
        Path(out).write_text(json.dumps(_EVENTS))
    exit_now = getattr(run_module, "_exit", None)  # how ``python -m study.run`` ends, where the checkout has it
    if exit_now is not None:
        exit_now(code)
    return code


def timeline(trials: int, epochs: int, concurrent: int = 1, repo: Path = REPO) -> dict[str, float]:
    """One instrumented study in a fresh directory; returns its phases in seconds."""
    from benchmarks.study_overhead import study_overrides

    work = Path(tempfile.mkdtemp(prefix="bench_timeline", dir="/tmp"))
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    events_file = work / "events.json"
    argv = [str(repo / SPEC.relative_to(REPO)), "--no-dashboard", f"--set=storage={work / 'runs'}"]
    argv += [f"--set={o}" for o in study_overrides(trials, epochs, concurrent)]
    # The child runs this file as a script, so that ``repo`` (an older checkout, say) needs none of benchmarks/.
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    try:
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(events_file), "--", *argv],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        t_exit = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"study failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        events = json.loads(events_file.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return _phases(events, t0, t_exit)


def _phases(events: list[tuple[str, float]], t0: float, t_exit: float) -> dict[str, float]:
    at: dict[str, float] = {}
    work: dict[str, float] = {}
    starts: dict[str, float] = {}
    first_result: dict[str, float] = {}
    completes: dict[str, float] = {}
    for name, value in events:
        kind, _, key = name.partition(":")
        if kind == "work":
            work[key] = work.get(key, 0.0) + value
        elif kind == "on_trial_start":
            starts[key] = value
        elif kind == "on_trial_result":
            first_result.setdefault(key, value)
        elif kind == "on_trial_complete":
            completes[key] = value
        else:
            at.setdefault(name, value)  # the first call of a wrapped function
    order = sorted(starts, key=starts.get)  # type: ignore[arg-type]
    phases = {
        "interpreter + imports": at["child:imports:end"] - t0,
        "load_spec": at["load_spec:end"] - at["load_spec:begin"],
        "checks before ray.init": at["ray_init:begin"] - at["run_study:begin"],
        "ray.init": at["ray_init:end"] - at["ray_init:begin"],
        "MLflow store": at["mlflow_store:end"] - at["mlflow_store:begin"],
        "build the Tuner": at["build_tuner:end"] - at["build_tuner:begin"],
        "Tuner.fit to 1st trial start": starts[order[0]] - at["build_tuner:end"],
        "to the first trial (total)": starts[order[0]] - t0,
    }
    setup = [first_result[t] - starts[t] - work[t] / max(1, epochs_reported(events, t)) for t in order]
    phases["1st trial: start to 1st result, less its epoch"] = setup[0]
    if len(order) > 1:
        phases["later trials: start to 1st result, less its epoch (mean)"] = sum(setup[1:]) / len(setup[1:])
        gaps = [starts[b] - completes[a] for a, b in zip(order, order[1:]) if a in completes]
        phases["gap between trials (mean)"] = sum(gaps) / max(1, len(gaps))
    span = max(completes.values()) - starts[order[0]]
    phases["trial phase"] = span
    phases["platform per trial"] = (span - sum(work.values())) / len(order)
    phases["last trial end to summary"] = at["summarize:begin"] - max(completes.values())
    phases["ray.shutdown"] = at["ray_shutdown:end"] - at["ray_shutdown:begin"]
    phases["ray.shutdown end to main() return"] = at["child:main:end"] - at["ray_shutdown:end"]
    phases["main() return to exit (interpreter teardown)"] = t_exit - at["child:main:end"]
    phases["last trial end to exit"] = t_exit - max(completes.values())
    phases["total"] = t_exit - t0
    return phases


def epochs_reported(events: list[tuple[str, float]], trial_id: str) -> int:
    return sum(1 for name, _ in events if name == f"work:{trial_id}")


def report(rows: list[dict[str, float]]) -> list[str]:
    """Median [min-max] of each phase over the repeats."""
    lines = []
    for key in rows[0]:
        xs = sorted(r[key] for r in rows)
        med = xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])
        lines.append(f"  {key:<58} {med:7.2f} s  [{xs[0]:.2f}-{xs[-1]:.2f}]")
    return lines


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        sys.exit(_child(sys.argv[i + 3 :], sys.argv[i + 1]))
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--concurrent", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--repo", type=Path, default=REPO, help="the checkout whose study.run runs")
    args = p.parse_args()
    rows = [timeline(args.trials, args.epochs, args.concurrent, args.repo) for _ in range(args.repeats)]
    print(f"driver timeline: ms_digits {args.trials} x {args.epochs}, {args.concurrent} at a time, {args.repo}")
    print("\n".join(report(rows)))


if __name__ == "__main__":
    main()

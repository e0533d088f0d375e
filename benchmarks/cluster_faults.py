"""Faults at random moments on the cluster deployment (:class:`harness.deployment.Deployment`: PostgreSQL, ``mlflow
server`` on it, moto's S3 emulator for ``storage: s3://…``, a ``ray start`` head and two workers with a token, all on
127.0.0.1 in a private network namespace): one study (or, with ``--table``, one table: 2 arms × 2 noise cells) per run,
with a final stage. Each fault is drawn from

- ``postgres restart`` (``pg_ctl -m fast``) and ``postgres crash`` (the postmaster SIGKILLed; crash recovery),
- ``mlflow restart`` (SIGTERM) and ``mlflow crash`` (the server SIGKILLed, mid-write if one is in flight),
- ``worker killed`` (a node SIGKILLed with its trial, replaced 5 s later as an autoscaler would),

each store down for a random 2-15 s, injected once a random number of epochs has been logged. Repeatable with
``--seed``.

    PYTHONPATH=$PWD python -m benchmarks.cluster_faults [--runs 1] [--faults 4] [--seed 0] [--table]

Prints per run the faults with their moments, whether the study finished without ``--resume`` (one that did not is
resumed and counted), then what the stores hold read back from PostgreSQL, **lost** and **duplicated** counted apart
(:meth:`~harness.deployment.Deployment.tally`: trial runs, epochs, Optuna trials), and the longest store outage ridden
out (from the driver's "is back after" lines). Goal: 0 lost and 0 duplicated. Needs root, Debian's PostgreSQL, moto
and a network namespace (as tests/study/runtime/test_deployment.py).
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from harness.deployment import Deployment, deployment_spec, deployment_table_spec, deployment_unavailable_reason

EPOCHS, TRIALS, SEEDS = 3, 4, 2
#: A table: 2 arms × 2 cells, this many trials per cell and final seeds per cell.
TABLE_TRIALS, TABLE_SEEDS, TABLE_CELLS = 2, 1, 4
METRICS = {"search": "val/recall_at_1", "final": "test/recall_at_1"}
KINDS = ("postgres restart", "postgres crash", "mlflow restart", "mlflow crash", "worker killed")
_BACK = re.compile(r"is back after ([0-9.]+) s")


def _inject(d: Deployment, kind: str, down: float) -> str | None:
    """Play one fault; ``None`` when it cannot be played now (no trial on a worker)."""
    if kind == "postgres restart":
        d.restart_postgres(down_s=down)
    elif kind == "postgres crash":
        d.crash_postgres(down_s=down)
    elif kind == "mlflow restart":
        d.restart_mlflow(down_s=down)
    elif kind == "mlflow crash":
        d.crash_mlflow(down_s=down)
    else:
        killed = d.kill_worker()
        if killed is None:
            return None
        time.sleep(5.0)
        d.add_worker()
        return f"worker node killed ({len(killed)} processes)"
    return f"{kind} ({down} s down)"


def one_run(rng: random.Random, faults: int, root: Path, index: int, table: bool) -> dict:
    searched, finals = (TABLE_TRIALS * TABLE_CELLS, TABLE_SEEDS * TABLE_CELLS) if table else (TRIALS, SEEDS)
    total = (searched + finals) * EPOCHS
    thresholds = sorted(rng.sample(range(1, total - 1), faults))
    plan = [(at, rng.choice(KINDS), round(rng.uniform(2.0, 15.0), 1)) for at in thresholds]
    name = f"{'table' if table else 'study'}_faults_{index}"
    injected: list[str] = []
    with Deployment(root / name) as d:
        spec = deployment_table_spec(d, name, TABLE_TRIALS, TABLE_SEEDS, EPOCHS) if table else None
        spec = spec or deployment_spec(d, name, TRIALS, SEEDS, EPOCHS)
        (root / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        args = [sys.executable, "-m", "study.run", f"{name}.yaml", "--address", d.address, "--max-failures", "3"]
        args.append("--no-dashboard")
        started = time.monotonic()
        errs = []
        proc = subprocess.Popen(
            args, cwd=root, env=d.driver_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        while plan and proc.poll() is None:
            at, kind, down = plan[0]
            if d.logged_epochs() >= at:
                moment = time.monotonic() - started
                done = _inject(d, kind, down)
                if done is None:  # no trial on a worker right now: try again shortly
                    time.sleep(0.3)
                    continue
                injected.append(f"{done} at {moment:.0f} s ({at} epochs logged)")
                plan.pop(0)
            time.sleep(0.3)
        errs.append(proc.communicate()[1])
        survived = proc.returncode == 0
        resumed = None
        if not survived:
            resumed = subprocess.run([*args, "--resume"], cwd=root, env=d.driver_env(), capture_output=True, text=True)
            errs.append(resumed.stderr)
        counts = d.tally(name, METRICS, searched, finals, EPOCHS)
        outages = [float(x) for err in errs for x in _BACK.findall(err)]
        return {
            "faults": injected,
            "survived": survived,
            "resume_rc": None if resumed is None else resumed.returncode,
            **counts,
            "longest_outage_s": max(outages, default=0.0),
            "wall_s": time.monotonic() - started,
            "exit_line": next((line for err in errs for line in err.splitlines() if line.startswith("error:")), ""),
        }


def _lost_duplicated(r: dict) -> str:
    return (
        f"lost: runs {r['runs_lost']}, epochs {r['epochs_lost']}, optuna trials {r['optuna_lost']}; "
        f"duplicated: runs {r['runs_duplicated']}, epochs {r['epochs_duplicated']}, optuna trials {r['optuna_duplicated']}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_faults", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="studies (or tables), each on a fresh deployment")
    p.add_argument("--faults", type=int, default=4, help="faults injected per run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--table", action="store_true", help="a table (2 arms x 2 noise cells) instead of a study")
    args = p.parse_args(argv)
    reason = deployment_unavailable_reason()
    if reason is not None:
        print(f"error: cannot run the deployment here: {reason}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    what = (
        f"table 2 arms x 2 cells x {TABLE_TRIALS} trials + {TABLE_SEEDS} final seed per cell"
        if args.table
        else f"study {TRIALS} trials + {SEEDS} final seeds"
    )
    print(f"cluster faults: {args.runs} run(s) x {args.faults} faults, seed {args.seed}; {what}, {EPOCHS} epochs each")
    results = []
    with tempfile.TemporaryDirectory(prefix="faults") as tmp:
        for i in range(args.runs):
            r = one_run(rng, args.faults, Path(tmp), i, args.table)
            results.append(r)
            outcome = "survived without --resume" if r["survived"] else f"needed --resume (rc {r['resume_rc']})"
            print(f"run {i}: {outcome}; longest outage {r['longest_outage_s']:.1f} s, {r['wall_s']:.0f} s")
            for fault in r["faults"]:
                print(f"  {fault}")
            print(f"  {_lost_duplicated(r)}")
            if r["exit_line"]:
                print(f"  {r['exit_line']}")
    total = {key: sum(r[key] for r in results) for key in results[0] if key.endswith(("_lost", "_duplicated"))}
    injected = sum(len(r["faults"]) for r in results)
    survived = sum(len(r["faults"]) for r in results if r["survived"])
    longest = max((r["longest_outage_s"] for r in results if r["survived"]), default=0.0)
    print(f"faults: {injected}; survived without --resume: {survived}; {_lost_duplicated(total)}; "
          f"longest outage survived: {longest:.1f} s")  # fmt: skip
    return 0 if all(v == 0 for v in total.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

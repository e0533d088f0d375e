"""Faults at random moments on the cluster deployment (:class:`harness.deployment.Deployment`: PostgreSQL, ``mlflow
server`` on it, moto's S3 emulator for ``storage: s3://…``, a ``ray start`` head and two workers with a token, all on
127.0.0.1 in a private network namespace): one study per run, with a final stage; each fault is a PostgreSQL restart,
an MLflow server restart (each down for a random 2-15 s) or a worker node SIGKILLed (replaced 5 s later, as an
autoscaler would), injected once a random number of epochs has been logged. Repeatable with ``--seed``.

    PYTHONPATH=$PWD python -m benchmarks.cluster_faults [--runs 1] [--faults 4] [--seed 0]

Prints the faults injected, the runs that finished without ``--resume`` (a study that did not is resumed and counted),
the trial runs and epochs lost (goal 0) and the longest store outage ridden out (from the driver's "is back after" lines).
Needs root, Debian's PostgreSQL, moto and a network namespace (as tests/study/test_deployment.py).
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

from harness.deployment import Deployment, deployment_spec, deployment_unavailable_reason

EPOCHS, TRIALS, SEEDS = 3, 4, 2
METRICS = {"search": "val/recall_at_1", "final": "test/recall_at_1"}
_BACK = re.compile(r"is back after ([0-9.]+) s")


def one_run(rng: random.Random, faults: int, root: Path, index: int) -> dict:
    total = (TRIALS + SEEDS) * EPOCHS
    thresholds = sorted(rng.sample(range(1, total - 1), faults))
    kinds = [rng.choice(["postgres", "mlflow", "worker"]) for _ in thresholds]
    downs = [round(rng.uniform(2.0, 15.0), 1) for _ in thresholds]
    name = f"faults_{index}"
    injected: list[str] = []
    with Deployment(root / name) as d:
        (root / f"{name}.yaml").write_text(yaml.safe_dump(deployment_spec(d, name, TRIALS, SEEDS, EPOCHS)))
        args = [sys.executable, "-m", "study.run", f"{name}.yaml", "--address", d.address, "--max-failures", "3"]
        args.append("--no-dashboard")
        started = time.monotonic()
        errs = []
        proc = subprocess.Popen(
            args, cwd=root, env=d.driver_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        plan = list(zip(thresholds, kinds, downs))
        while plan and proc.poll() is None:
            at, kind, down = plan[0]
            if d.logged_epochs() >= at:
                moment = time.monotonic() - started
                if kind == "postgres":
                    d.restart_postgres(down_s=down)
                    injected.append(f"postgres restart ({down} s down) at {moment:.0f} s")
                elif kind == "mlflow":
                    d.restart_mlflow(down_s=down)
                    injected.append(f"mlflow server restart ({down} s down) at {moment:.0f} s")
                else:
                    killed = d.kill_worker()
                    if killed is None:  # no trial on a worker right now: try again shortly
                        time.sleep(0.3)
                        continue
                    injected.append(f"worker node killed ({len(killed)} processes) at {moment:.0f} s")
                    time.sleep(5.0)
                    d.add_worker()
                plan.pop(0)
            time.sleep(0.3)
        errs.append(proc.communicate()[1])
        survived = proc.returncode == 0
        resumed = None
        if not survived:
            resumed = subprocess.run([*args, "--resume"], cwd=root, env=d.driver_env(), capture_output=True, text=True)
            errs.append(resumed.stderr)
        runs_lost, epochs_lost = d.losses(name, METRICS, TRIALS + SEEDS, EPOCHS)
        outages = [float(x) for err in errs for x in _BACK.findall(err)]
        return {
            "faults": injected,
            "survived": survived,
            "resume_rc": None if resumed is None else resumed.returncode,
            "runs_lost": runs_lost,
            "epochs_lost": epochs_lost,
            "longest_outage_s": max(outages, default=0.0),
            "wall_s": time.monotonic() - started,
            "exit_line": next((line for err in errs for line in err.splitlines() if line.startswith("error:")), ""),
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_faults", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="studies, each on a fresh deployment")
    p.add_argument("--faults", type=int, default=4, help="faults injected per study")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    reason = deployment_unavailable_reason()
    if reason is not None:
        print(f"error: cannot run the deployment here: {reason}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    print(
        f"cluster faults: {args.runs} run(s) x {args.faults} faults, seed {args.seed}; study {TRIALS} trials + {SEEDS} final seeds x {EPOCHS} epochs"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="faults") as tmp:
        for i in range(args.runs):
            r = one_run(rng, args.faults, Path(tmp), i)
            results.append(r)
            print(f"run {i}: {'survived without --resume' if r['survived'] else 'needed --resume (rc ' + str(r['resume_rc']) + ')'}; "
                  f"runs lost {r['runs_lost']}, epochs lost {r['epochs_lost']}, longest outage {r['longest_outage_s']:.1f} s, {r['wall_s']:.0f} s")  # fmt: skip
            for fault in r["faults"]:
                print(f"  {fault}")
            if r["exit_line"]:
                print(f"  {r['exit_line']}")
    injected = sum(len(r["faults"]) for r in results)
    survived = sum(len(r["faults"]) for r in results if r["survived"])
    print(
        f"faults injected: {injected}; survived without --resume: {survived}; "
        f"runs lost: {sum(r['runs_lost'] for r in results)}; epochs lost: {sum(r['epochs_lost'] for r in results)}; "
        f"longest outage survived: {max((r['longest_outage_s'] for r in results if r['survived']), default=0.0):.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

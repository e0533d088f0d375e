"""``python -m study.deploy.job COMMAND``: what a ``dmlstudy slurm`` job decides while it runs, in Python rather than
in its bash, so that each decision is tested without a Slurm (tests/study/deploy/test_slurm_job.py) and the script stays
the short one a user reads (docs/notebook/cluster.md "Deploy on Slurm"). The script calls these commands at the address
:mod:`study.deploy.job`, which outlives moves: Slurm keeps a submitted job's script.

The job script calls, in each run of the job:

- ``nodes``: the job's nodes, one a line, the node running the script first: it holds the Ray head, whose address
  file only that node can read.
- ``ray-node``: this node's ``ray start --block`` (exec'd, so the ``srun`` step's signals reach it), every port Ray
  listens on picked by the kernel when it binds (:func:`~study.deploy.slurm.nodes.ray_start_argv`): nothing fixed
  that another job on the node could already hold, nothing derived from the job id (ids 120 apart shared one port
  before).
- ``wait-head``: wait, bounded, until *this job's* head is up and print its address: the GCS address Ray itself
  wrote to the job's ``RAY_TMPDIR`` in this run, a GCS there that accepts this run's token, and a head node in it
  whose temp dir is this job's (:func:`~study.deploy.slurm.nodes.this_jobs_head`). A connect that another job's head
  answers is not enough.
- ``wait-nodes``: wait, bounded, until every node has joined.
- ``end``: after the driver exits: requeue the job, or say why not (:mod:`study.deploy.slurm.ending`). Each run's
  record is appended to the study's :data:`~trainables.schema.record.SLURM_RUNS_FILE`
  (:mod:`study.deploy.slurm.records`), so a later run that measured no epoch still knows how long one takes.

Each command prints its lines as the script's ``say`` does (``[date time] line``) and exits with the code the script
passes on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

from study.arguments import ArgumentParser
from study.deploy.slurm.ending import RunEnd, finish, say
from study.deploy.slurm.nodes import (
    HEAD_TIMEOUT_S,
    NODES_TIMEOUT_S,
    RAY_ADDRESS_FILE,
    HeadWait,
    RayNode,
    head_first,
    ray_start_argv,
    wait_head,
)
from study.deploy.slurm.records import append_record, earlier_runs, this_runs_progress
from study.deploy.slurm.scontrol import run_scontrol, show_job
from study.runtime.cluster import quiet_fd2
from study.runtime.ray_node import cluster_nodes, ray_client_installed

__all__ = ["main"]


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m study.deploy.job", description="The decisions of a dmlstudy slurm job.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("nodes", help="the job's nodes, the batch script's first")
    node = sub.add_parser("ray-node", help="exec this node's ray start --block")
    node.add_argument("--ray", required=True)
    node.add_argument("--ip", required=True)
    node.add_argument("--cpus", type=int, required=True)
    node.add_argument("--gpus", type=int, default=0)
    node.add_argument("--tmpdir", required=True)
    node.add_argument("--address", default=None, help="the head's address (a worker node); none: the head")
    head = sub.add_parser("wait-head", help="print this job's head's address once it is up")
    head.add_argument("--tmpdir", required=True)
    head.add_argument("--pid", type=int, required=True, help="the head's srun step")
    head.add_argument("--since", type=float, required=True, help="when the head was started (epoch seconds)")
    head.add_argument("--timeout", type=float, default=HEAD_TIMEOUT_S)
    nodes = sub.add_parser("wait-nodes", help="wait until N nodes are alive")
    nodes.add_argument("address")
    nodes.add_argument("count", type=int)
    nodes.add_argument("--timeout", type=float, default=NODES_TIMEOUT_S)
    end = sub.add_parser("end", help="after the driver: requeue, or say why not; exits with the job's code")
    end.add_argument("--rc", type=int, required=True)
    end.add_argument("--driver-pid", default="", help="the driver's PID (empty: it never started)")
    end.add_argument("--elapsed", type=float, required=True, help="seconds since the script started")
    end.add_argument("--study-dir", required=True)
    end.add_argument("--max-requeues", type=int, required=True)
    end.add_argument("--signal-lead", type=int, required=True)
    end.add_argument("--continue", dest="continue_command", required=True)
    end.add_argument("--study-log", default="")
    end.add_argument("--signal", default="", help="the first stop signal the script trapped (SIGTERM; empty: none)")
    return p


def _exec_ray_node(a: argparse.Namespace) -> NoReturn:
    if a.address is None:  # the head: an earlier run's address file must not be read as this run's
        with contextlib.suppress(OSError):
            (Path(a.tmpdir) / RAY_ADDRESS_FILE).unlink()
    node = RayNode(ip=a.ip, cpus=a.cpus, gpus=a.gpus, tmpdir=a.tmpdir)
    argv = ray_start_argv(a.ray, node, address=a.address, ray_client=ray_client_installed())
    sys.stdout.flush()
    os.execv(argv[0], argv)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that has exited but is not yet reaped (the script's srun) still answers kill -0: look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _wait_nodes(address: str, count: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    up = 0
    while True:
        with contextlib.suppress(Exception), quiet_fd2():
            up = sum(n.alive for n in cluster_nodes(address, timeout_s=10))
        if up >= count or time.monotonic() > deadline:
            break
        time.sleep(1)
    say(f"ray: {up} of {count} nodes up" + ("" if up >= count else f" after {timeout_s:.0f} s; the study runs on them"))
    return 0


def _end(a: argparse.Namespace) -> int:
    job_id = os.environ.get("SLURM_JOB_ID", "?")
    study_dir = Path(a.study_dir)
    driver_started = bool(a.driver_pid)
    stopped = a.rc in (3, 128 + signal.SIGTERM)  # what decide looks further at
    progress, note = (None, "the driver did not run")
    if driver_started:
        progress, note = this_runs_progress(study_dir, a.rc, time.time() - a.elapsed)
    end = RunEnd(
        rc=a.rc,
        restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0),
        max_requeues=a.max_requeues,
        elapsed_s=a.elapsed,
        signal_lead_s=a.signal_lead,
        continue_command=a.continue_command,
        study_log=a.study_log,
        driver_started=driver_started,
        progress=progress,
        progress_note=note,
        slurm=show_job(job_id) if stopped else None,
        earlier=earlier_runs(study_dir) if stopped else (),
        signal=a.signal or None,
    )

    def requeue() -> tuple[int, str]:
        done = run_scontrol(["requeue", job_id], timeout=60)
        if done is None:
            return 1, "scontrol did not answer"
        return done.returncode, (done.stderr or done.stdout).strip()

    ending = finish(end, job_id, requeue, lambda: show_job(job_id))
    if ending.action != "finished":
        append_record(study_dir, job_id, end, ending)
    return ending.exit_code


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.command == "nodes":
        shown = run_scontrol(["show", "hostnames", os.environ.get("SLURM_JOB_NODELIST", "")])
        if shown is None or shown.returncode != 0:
            say("scontrol show hostnames failed: the job's nodes are unknown; not requeued", err=True)
            return 1
        print("\n".join(head_first(shown.stdout.split(), os.environ.get("SLURMD_NODENAME"))))
        return 0
    if a.command == "ray-node":
        _exec_ray_node(a)
    if a.command == "wait-head":
        address, why = wait_head(HeadWait(a.tmpdir, a.since, a.timeout), alive=lambda: _pid_alive(a.pid))
        if address is None:
            say(f"{why}; not requeued", err=True)
            return 1
        print(address)
        return 0
    if a.command == "wait-nodes":
        return _wait_nodes(a.address, a.count, a.timeout)
    return _end(a)


if __name__ == "__main__":
    sys.exit(main())

"""The job's nodes and its Ray head, for the job's commands ``nodes``, ``ray-node`` and ``wait-head``: the node that
runs the batch script first (:func:`head_first`), each node's ``ray start`` on ports the kernel picks
(:func:`ray_start_argv`), and this run's head told apart from any other job's (:func:`wait_head`,
:func:`this_jobs_head`)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from study.arguments import one_line
from study.runtime.cluster import quiet_fd2
from study.runtime.ray_node import cluster_nodes

__all__ = [
    "head_first",
    "RayNode",
    "ray_start_argv",
    "read_head_address",
    "this_jobs_head",
    "HeadWait",
    "wait_head",
]

#: Ray writes the GCS address of the node it started into its temp dir under this name (``ray start``; Ray's
#: ``get_ray_address_file``): with ``--port=0`` it is the port the GCS bound.
RAY_ADDRESS_FILE = "ray_current_cluster"
#: How long ``wait-head`` and ``wait-nodes`` wait by default.
HEAD_TIMEOUT_S = 120
NODES_TIMEOUT_S = 300


def head_first(hosts: Sequence[str], batch_host: str | None) -> list[str]:
    """The job's nodes with the one running the batch script first (it starts the head and reads its address)."""
    if batch_host and batch_host in hosts:
        return [batch_host, *(h for h in hosts if h != batch_host)]
    return list(hosts)


@dataclass(frozen=True)
class RayNode:
    """One node of the job as ``ray start`` is told of it: the address Slurm reaches it at, its share of the node,
    and the job's own ``RAY_TMPDIR``."""

    ip: str
    cpus: int
    gpus: int
    tmpdir: str


def ray_start_argv(ray: str, node: RayNode, *, address: str | None, ray_client: bool) -> list[str]:
    """``ray start --block`` for one node of the job; ``address`` ``None`` makes it the head.

    Every port is 0, "the kernel picks one when the process binds", so it cannot be one another job on the node
    already listens on, and nothing depends on the job id. Ray's fixed defaults are each replaced: the GCS (6379;
    its port is then read from :data:`RAY_ADDRESS_FILE`), the dashboard (8265) and the dashboard agent (52365), and
    the workers' shared range 10002-19999. The Ray Client server (10001) is not started: the driver connects to the
    GCS. Ray picks the rest itself already (raylet, object manager, runtime-env and metrics agents).
    """
    argv = [ray, "start", "--block", "--disable-usage-stats", f"--node-ip-address={node.ip}"]
    argv += [f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}", f"--temp-dir={node.tmpdir}"]
    argv += ["--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0"]
    if address is not None:
        return [*argv, f"--address={address}"]
    argv += ["--head", "--port=0", "--include-dashboard=false", "--dashboard-port=0"]
    if ray_client:  # Ray refuses the option where the client's dependencies are missing (and then starts none)
        argv.append("--ray-client-server-port=0")
    return argv


def read_head_address(tmpdir: str | Path, since: float) -> str | None:
    """The GCS address Ray wrote to ``tmpdir`` at ``since`` or later (an older file is an earlier run's)."""
    path = Path(tmpdir) / RAY_ADDRESS_FILE
    try:
        if path.stat().st_mtime < since - 1:  # whole seconds in the script's clock
            return None
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def this_jobs_head(address: str, tmpdir: str | Path) -> tuple[bool, str]:
    """Whether the GCS at ``address`` is this job's head, and if not why: it must accept this process's token
    (``RAY_AUTH_TOKEN``, fresh in each run) and hold an alive head node whose temp dir is this job's ``tmpdir``
    (another user's Ray without authentication accepts any token)."""
    from ray.exceptions import AuthenticationError  # defers Ray: only the steps that talk to the head import it

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            pass
    except (OSError, ValueError) as e:
        return False, f"nothing answers at {address} ({getattr(e, 'strerror', None) or type(e).__name__})"
    try:
        with quiet_fd2():
            nodes = cluster_nodes(address, timeout_s=5)
    except AuthenticationError:
        return False, f"the Ray head at {address} refuses this job's token: it is another job's"
    except Exception as e:  # noqa: BLE001 - a GCS still starting, or gone again: asked again until the deadline
        return False, f"the Ray head at {address} did not answer ({one_line(str(e))[:200]})"
    mine = os.path.realpath(tmpdir)
    heads = [n for n in nodes if n.head and n.alive]
    if any(os.path.realpath(n.temp_dir) == mine for n in heads):
        return True, ""
    if not heads:
        return False, f"the Ray cluster at {address} has no live head node yet"
    return False, f"the Ray head at {address} is another job's (its temp dir is {heads[0].temp_dir}, not {mine})"


@dataclass(frozen=True)
class HeadWait:
    """What :func:`wait_head` waits for: an address Ray writes to ``tmpdir`` at ``since`` or later (this run's), for at
    most ``timeout_s`` seconds."""

    tmpdir: str | Path
    since: float
    timeout_s: float


def wait_head(
    wait: HeadWait,
    alive: Callable[[], bool],
    check: Callable[[str, str | Path], tuple[bool, str]] = this_jobs_head,
    poll_s: float = 0.5,
) -> tuple[str | None, str]:
    """``(address, "")`` once this job's head is up, else ``(None, why)`` when ``alive()`` turns false (the head's
    ``srun`` step ended) or after ``wait.timeout_s``."""
    tmpdir, since, timeout_s = wait.tmpdir, wait.since, wait.timeout_s
    deadline = time.monotonic() + timeout_s
    why = f"Ray wrote no address to {Path(tmpdir) / RAY_ADDRESS_FILE} in this run"
    while True:
        address = read_head_address(tmpdir, since)
        if address is not None:
            ok, why = check(address, tmpdir)
            if ok:
                return address, ""
        if not alive():
            return None, f"the Ray head's srun step ended before the head was up ({why}; its lines are above)"
        if time.monotonic() > deadline:
            return None, f"this job's Ray head was not up within {timeout_s:.0f} s ({why})"
        time.sleep(poll_s)

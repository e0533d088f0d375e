"""Private Ray internals of the cluster and its local instance, in one place, each with a test
(tests/study/runtime/test_compat.py): ask a cluster's GCS whether this driver's token is accepted and which nodes it
knows, before ``ray.init``; whether ``ray start`` starts a Ray Client server; start a private instance on loopback,
its processes in sessions of their own; find the processes of the private instance this driver started.

Apart from :mod:`study.runtime.compat` (the Tune and Optuna internals a study's search relies on) because these are
about the Ray node under the study, not the study; the pins in ``pyproject.toml`` (``ray[tune]`` 2.50–2.60) are the
versions they were checked against.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = [
    "gcs_client",
    "GcsNode",
    "cluster_nodes",
    "ray_client_installed",
    "LOCAL_ONLY_ENV",
    "loopback_local_instance",
    "own_session_local_instance",
    "private_node_processes",
    "watching_attached",
    "WORKER_ENV",
    "watch_attached",
    "reload_auth_settings",
]


def gcs_client(address: str) -> Any:
    """A client of the GCS at ``host:port``; building it authenticates with this process's ``RAY_AUTH_*``
    environment and raises ``ray.exceptions.AuthenticationError`` when the cluster refuses the token."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


class GcsNode(NamedTuple):
    """One node as the GCS lists it: whether it is the head, alive, and its Ray temp dir (``ray start --temp-dir``)."""

    head: bool
    alive: bool
    temp_dir: str


def cluster_nodes(address: str, timeout_s: float) -> list[GcsNode]:
    """Every node the GCS at ``host:port`` knows, asked with this process's ``RAY_AUTH_*`` environment, without
    starting a driver (``ray.init``): ``GcsClient.get_all_node_info`` and ``GcsNodeInfo``'s fields. Raises
    ``ray.exceptions.AuthenticationError`` when the cluster refuses the token; building the client against a port
    where nothing listens takes Ray's ~40 s of retries, so connect first."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]

    infos = gcs_client(address).get_all_node_info(timeout=timeout_s)
    return [GcsNode(n.is_head_node, n.state == GcsNodeInfo.ALIVE, n.temp_dir) for n in infos.values()]


def reload_auth_settings() -> None:
    """Have this process use the ``RAY_AUTH_*`` environment as it is now: Ray reads ``RAY_AUTH_MODE`` into its C++
    ``RayConfig`` when it is imported, and its token loader caches the first token it finds; a driver that sets them
    later (to attach to the warm head with its token) reloads both, as Ray's own ``_enable_token_auth`` and
    ``ensure_token_if_auth_enabled`` do: ``Config.initialize("")``, ``AuthenticationTokenLoader.reset_cache()``."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def ray_client_installed() -> bool:
    """Whether ``ray start --head`` starts a Ray Client server (on port 10001 unless told otherwise): Ray's own test,
    whether its client's dependencies import."""
    from ray._private.utils import get_ray_client_dependency_error

    return get_ray_client_dependency_error() is None


#: Ray's switch between "a node of a cluster" (its network address) and "a local instance" (loopback) for the address
#: a new node takes; named for Windows and macOS, where a local instance is the default.
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def loopback_local_instance() -> Iterator[None]:
    """While the block runs, a node Ray starts takes 127.0.0.1 as its address; its GCS, raylet, agents and workers
    then listen on loopback only (Ray's C++ servers bind 127.0.0.1 when the node address is 127.0.0.1, else every
    interface).

    ``ray.init(_node_ip_address="127.0.0.1")`` cannot do it: Ray rewrites a loopback address to the machine's network
    address unless ``ray_constants.ENABLE_RAY_CLUSTER`` (read from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when Ray is
    first imported) is false; then ``services.get_node_ip_address`` answers 127.0.0.1, which is how Ray keeps a local
    instance off the network on Windows and macOS. Both the constant (Ray may already be imported) and the variable
    (inherited by the processes Ray starts) are set, and both restored afterwards, so a later cluster connection in
    the same process is untouched.
    """
    from ray._private import ray_constants

    before_env, before_flag = os.environ.get(LOCAL_ONLY_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = before_env


@contextlib.contextmanager
def own_session_local_instance() -> Iterator[None]:
    """While the block runs, each process Ray starts for a local instance (its GCS, raylet, log monitor, autoscaler
    monitor, dashboard; the raylet then starts the agents and workers below itself) starts in a session of its own, so
    a signal sent to the driver's process group (Ctrl-C, ``timeout``, ``kill -TERM -PGID``) reaches the driver alone:
    the driver stops the study (:mod:`study.runtime.stopping`) while its Ray is still there to save it.

    Ray starts them through ``ray._private.services.ConsolePopen`` (a ``subprocess.Popen`` on Linux, looked up when
    each process starts), and blocks only ``SIGINT`` in them; on Windows it already gives each its own process group.
    Their fate stays shared with the driver: Ray sets ``PR_SET_PDEATHSIG`` in each (``fate_share``), so they still
    end when the driver dies. Where the kernel offers no fate-sharing, Ray's reaper ends them by process group
    instead, and nothing is changed. Checked against Ray 2.60.
    """
    from ray._private import services
    from ray._private.utils import detect_fate_sharing_support

    base = services.ConsolePopen
    if not detect_fate_sharing_support():
        yield
        return

    class OwnSession(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnSession  # type: ignore[misc]
    try:
        yield
    finally:
        services.ConsolePopen = base  # type: ignore[misc]


#: Environment that a local instance's processes (its workers: the trials) inherit from the process that starts it, set
#: there when not set already. A reused worker (reuse_actors) first waits for the previous trial's thread to end, 2 s
#: by default, and fails the next trial if it has not: an early-stopped trial tearing down its DataLoader workers on a
#: busy node can take longer. On a cluster, set it where Ray starts.
WORKER_ENV = {"TUNE_FUNCTION_THREAD_TIMEOUT_S": "60"}

#: The processes of a local instance this driver attached to without starting it (the warm head), by name.
_attached: dict[str, Any] = {}


def watch_attached(processes: dict[str, Any]) -> None:
    """From now on :func:`private_node_processes` answers ``processes`` (name → an object with ``pid`` and ``poll()``,
    like ``subprocess.Popen``) for a driver that attached to a local instance it did not start, so that it watches that
    instance as its own: the warm head (:mod:`study.runtime.warm_head`). Empty: forget them (the driver shuts down)."""
    _attached.clear()
    _attached.update(processes)


def watching_attached() -> bool:
    """Whether the instance watched is one this driver attached to (the warm head), not one it started."""
    return bool(_attached)


def private_node_processes() -> dict[str, Any]:
    """The processes of the local instance this driver's ``ray.init`` started (no address), by Ray's name for each:
    ``gcs_server`` and ``raylet``, each the ``subprocess.Popen`` Ray keeps in ``Node.all_processes`` (a list of
    ``ProcessInfo`` per process type) of ``ray._private.worker._global_node``; or those of the local instance it
    attached to (:func:`watch_attached`); empty when this driver started none and attached to none (connected to a
    cluster, whose processes are another host's, or Ray not initialized)."""
    from ray._private import ray_constants, worker

    node = getattr(worker, "_global_node", None)
    found: dict[str, Any] = {}
    for kind in (ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET):
        infos = getattr(node, "all_processes", {}).get(kind) or []
        if infos and infos[0].process is not None:
            found[kind] = infos[0].process
    return found or dict(_attached)

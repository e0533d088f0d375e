"""Connecting the driver to Ray (:func:`connect_ray`): a cluster it cannot reach or authenticate to is one line, and
a node-local storage path on a multi-node cluster is refused (:func:`check_storage_reachable`).

Left to ``ray.init``, a head that wants a token (Ray ≥ 2.59 turns token authentication on for ``ray start`` unless
``RAY_AUTH_MODE=disabled``) and a driver without it cost a minute of retries, one C++ warning per retry and three
chained tracebacks; a wrong address costs the same minute. So before ``ray.init`` the driver probes a ``host:port``
address once: a TCP connect, then one GCS client built with the driver's own authentication settings (the same
environment ``ray.init`` reads; with an explicit address Ray never falls back to ``~/.ray/auth_token``). The probe's
C++ warnings go to /dev/null; its verdict becomes a :class:`~trainables.schema.errors.StudyError` (exit 2) naming the fix.

Without an address the study starts a private instance that nothing on another host needs to reach, so it binds
loopback: node address 127.0.0.1 and every listener (GCS, raylet, agents, workers, the driver) on 127.0.0.1
(:func:`study.runtime.compat.loopback_local_instance`). Left to itself Ray takes the machine's network address and listens on
every interface. With an address (a real cluster) Ray's own choice stands, except for the warm local head
(``--address warm``, :mod:`study.runtime.warm_head`): a private instance made long-lived, which the driver joins on
loopback with the head's own token, and watches as its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from study.runtime import warm_head
from study.runtime.ray_node import (
    WORKER_ENV,
    gcs_client,
    loopback_local_instance,
    own_session_local_instance,
    reload_auth_settings,
    watch_attached,
)
from study.runtime.storage import is_shared_path
from trainables.schema.errors import SpecError, StudyError

__all__ = [
    "probe_cluster",
    "connect_error",
    "auth_hint",
    "private_instance_token",
    "connect_ray",
    "attach_warm_head",
    "check_storage_reachable",
    "quiet_fd2",
]

_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


def auth_hint() -> str:
    """What to set, phrased for the driver's current authentication settings."""
    mode = os.environ.get("RAY_AUTH_MODE") or "unset"
    has_token = bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"))
    have = f"RAY_AUTH_MODE is {mode}" + (", and the token given is not the cluster's" if has_token else "")
    return (
        f"({have}): export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the cluster's token> (`ray get-auth-token` on the "
        "head prints it; or copy the head's ~/.ray/auth_token and set RAY_AUTH_TOKEN_PATH), as on every node; "
        "see docs/notebook/cluster.md"
    )


def _auth_line(address: str) -> str:
    return f"cannot authenticate to the Ray cluster at {address}: it requires its token {auth_hint()}"


def _unreachable_line(address: str, why: str) -> str:
    port = address.rsplit(":", 1)[-1]
    return (
        f"cannot reach the Ray cluster at {address} ({why}): start its head (`ray start --head --port {port}`) or "
        "point --address / RAY_ADDRESS at a running one"
    )


@contextlib.contextmanager
def quiet_fd2() -> Iterator[None]:
    """Silence file descriptor 2 (Ray's C++ client logs each failed attempt there), restoring it afterwards."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def probe_cluster(address: str, timeout: float = 10.0) -> None:
    """Raise :class:`StudyError` when the GCS at ``host:port`` is unreachable or refuses this driver's token.

    Other address forms (``auto``, ``ray://``) are left to ``ray.init``; so is any other failure of the probe.
    """
    match = _HOST_PORT.match(address)
    if match is None:
        return
    try:
        with socket.create_connection((match["host"].strip("[]"), int(match["port"])), timeout=timeout):
            pass
    except OSError as e:
        raise StudyError(_unreachable_line(address, e.strerror or type(e).__name__)) from None
    from ray.exceptions import AuthenticationError

    try:
        with quiet_fd2():
            gcs_client(address)
    except AuthenticationError:
        raise StudyError(_auth_line(address)) from None
    except Exception:  # noqa: BLE001, S110 - ray.init reports whatever else is wrong, with its own words
        pass


def connect_error(e: BaseException, address: str) -> str | None:
    """The one line for a failed ``ray.init(address)``, or ``None`` when it is not a connection failure."""
    from ray.exceptions import AuthenticationError

    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, AuthenticationError) or "InvalidAuthToken" in str(seen):
            return _auth_line(address)
        seen = seen.__cause__ or seen.__context__
    if isinstance(e, ConnectionError):
        return _unreachable_line(address, "no answer")
    return None


def private_instance_token() -> None:
    """Give the study's private local Ray a token in the environment, so that Ray does not write one to
    ``~/.ray/auth_token`` (outside the study's storage) when token authentication is on and no token exists.

    Ray ≥ 2.59 enables tokens for a local instance when ``RAY_AUTH_MODE`` is unset and generates the file when it
    finds no token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``). Ray's processes inherit
    this environment; the token lives as long as the instance. A token the user configured is left alone.
    """
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if (Path.home() / ".ray" / "auth_token").exists():
        return
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)


def connect_ray(address: str | None) -> bool:
    """Connect to ``address`` / ``RAY_ADDRESS``, or start a private local instance. True if we called init."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    # Every epoch checkpoints by design; Ray warns about frequent experiment snapshots otherwise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Snapshot the experiment (trials + searcher) every second instead of Ray's ≥ 10 s, so a killed driver
    # forgets as little as possible; what it still forgets is reconciled on resume (StudySearch.restore,
    # MlflowTrialCallback's ghost runs).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    # Workers of a local instance inherit these (ray_node.WORKER_ENV); on a cluster, set them where Ray starts.
    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    head = None if address == "local" else attach_warm_head(address)
    address = head.address if head is not None else address
    on_loopback = address == "local" or head is not None
    if address != "local":
        with loopback_local_instance() if on_loopback else contextlib.nullcontext():
            probe_cluster(address)  # unreachable or a missing token: one line now, not a minute of retries
    else:
        private_instance_token()
    try:
        with (
            loopback_local_instance() if on_loopback else contextlib.nullcontext(),
            contextlib.nullcontext() if address != "local" else own_session_local_instance(),
        ):
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    except Exception as e:
        watch_attached({})
        if address == "local" or (line := connect_error(e, address)) is None:
            raise
        raise StudyError(line) from None
    return True


def attach_warm_head(address: str) -> warm_head.HeadState | None:
    """When ``address`` names the warm local head (``warm``, or its own ``host:port``): give this driver the head's
    token, have it watch the head's GCS and raylet as its own instance's, and return the head; else ``None``. Raises
    :class:`StudyError` for ``warm`` when no head runs."""
    head = warm_head.resolve(address)
    if head is not None:
        warm_head.attach_env(head)
        reload_auth_settings()
        watch_attached(dict(head.watched()))
    return head


def shutdown_ray() -> None:
    """Shut down the Ray this driver started, with Python's cyclic garbage collector paused.

    Why: between the core worker's shutdown and Ray dropping it, an object reference freed by a garbage-collection
    pass, which may run in any thread (Ray's own C++ threads call into Python), reaches the dead core worker, and Ray
    ends the whole process with exit 1 ("The core worker has already been shutdown ... The process will exit"). A
    stopped study then exits 1 instead of 3 (seen 1 in 2 runs of tests/study/runtime/test_stop_signal.py). So the
    garbage is collected first, while the core worker is up, and no pass runs until Ray has let it go; a reference
    freed after that is harmless.
    """
    import gc

    import ray

    watch_attached({})
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        ray.shutdown()
    finally:
        if was_enabled:
            gc.enable()


def check_storage_reachable(root: str, shared_storage: bool) -> None:
    """Refuse a node-local storage path (the study's directory ``root``) when the cluster has more than one
    node; a URI (object storage) is reachable from every node."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) <= 1 or "://" in root or shared_storage or is_shared_path(Path(root).parent):
        return
    raise SpecError(
        f"storage: {root} is on a local disk but the Ray cluster has {len(nodes)} nodes, whose trials "
        "could not write their checkpoints there; use a shared mount (NFS) or an s3:// / gs:// URI, or pass "
        "--shared-storage if this path is shared"
    )

"""Nothing waits silently: a study whose trials can get no resources fails with one line.

Ray Tune waits forever for resources no node has ("No available node types can fulfill resource request"): on a
local instance :func:`check_resources` refuses such a spec before any trial starts; on a cluster, where an
autoscaler may still add a node, :class:`PendingTimeout` fails the study once no trial has run for
``--pending-timeout`` seconds while some wait.

The study's own local Ray (no ``--address``) is no cluster a node can be added to: when its raylet or GCS dies (a
``kill``, the kernel's out-of-memory killer), :class:`PrivateRayWatch` ends the driver within a second, its runs
KILLED, with one line naming what died and the ``--resume`` line (exit 3: what was saved is saved, as after a stop).
Left to Ray, the driver logged "Cluster resources cannot be detected" until ``--pending-timeout`` (600 s) and blamed
the cluster; and Ray, some 15 s after the raylet's death, failed the running trials ("Owner's node has crashed"),
which Optuna then recorded FAIL and a table's cell replaced, though ``--resume`` restored them from their checkpoints
and they finished.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from study.runtime.compat import before_trial_failure
from study.runtime.ray_node import private_node_processes, watching_attached
from study.runtime.shells import PickledAsDiscarded
from trainables.schema.errors import SpecError, StudyStalledError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ray.tune.experiment import Trial

    from trainables.schema.spec import StudySpec

__all__ = ["PendingTimeout", "PrivateRayWatch", "check_local_resources", "check_cluster_resources", "exit_phrase"]


def _need(spec: StudySpec) -> dict[str, float]:
    return {"CPU": float(spec.resources.cpu), "GPU": float(spec.resources.gpu)}


def _key(resource: str) -> str:
    return f"resources.{resource.lower()}"


def check_local_resources(spec: StudySpec) -> None:
    """Before a private local Ray instance starts: one trial's CPUs and GPUs exist on this machine."""
    have = {"CPU": float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)}
    if spec.resources.gpu > 0:
        import torch

        have["GPU"] = float(torch.cuda.device_count())
    for resource, amount in _need(spec).items():
        if amount > have.get(resource, amount):
            raise SpecError(
                f"a trial needs {amount:g} {resource}(s) but this machine has {have[resource]:g}; "
                "lower it, or connect to a cluster that has them with --address",
                key=_key(resource),
            )


def check_cluster_resources(spec: StudySpec, nodes: list[dict[str, Any]], local: bool) -> str | None:
    """One trial fits on some alive node. A private local instance that cannot fit it raises :class:`SpecError`;
    on a cluster (an autoscaler may add a node) the reason is returned for a warning instead."""
    need = {r: a for r, a in _need(spec).items() if a > 0}
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    if any(all(res.get(r, 0.0) >= a for r, a in need.items()) for res in alive):
        return None
    best = {r: max((res.get(r, 0.0) for res in alive), default=0.0) for r in need}
    short = next(r for r in need if best[r] < need[r])
    message = f"a trial needs {need[short]:g} {short}(s) but no Ray node has more than {best[short]:g}"
    if local:
        raise SpecError(message + "; lower it, or connect to a cluster that has them with --address", key=_key(short))
    return message


class PendingTimeout(PickledAsDiscarded, Callback):
    """Fails the study when trials have waited ``timeout_s`` seconds for resources while none was running.

    Called by Ray Tune after every step of its loop; raising there ends ``Tuner.fit`` (the driver then closes
    the MLflow runs as FAILED, and the study can be resumed once the resources exist).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._waiting_since: float | None = None

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if self.timeout_s <= 0:
            return
        statuses = {t.status for t in trials}
        if "PENDING" not in statuses or "RUNNING" in statuses:
            self._waiting_since = None
            return
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since > self.timeout_s:
            raise StudyStalledError(
                f"no trial could start for {self.timeout_s:g} s: the Ray cluster has no node with a trial's "
                "resources (resources.cpu / resources.gpu); add one and resume with --resume, or raise --pending-timeout"
            )


def exit_phrase(code: int) -> str:
    """How a process ended, from its ``Popen.returncode``: ``was killed by SIGKILL`` or ``exited with 1``."""
    if code >= 0:
        return f"exited with {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    # The kernel's out-of-memory killer sends SIGKILL: the one death a user did not cause and may not suspect.
    return f"was killed by {name}" + (" (a kill -9, or the kernel's out-of-memory killer)" if -code == 9 else "")


class PrivateRayWatch:
    """Ends the driver when the private local Ray it started dies: its raylet or GCS process exits.

    ``end(why)`` ends the driver (:meth:`~study.runtime.stop_callback.RayLossWatch.end`: the runs KILLED, the
    ``--resume`` line, exit 3; it does nothing once the driver shuts Ray down itself). Two ways in, both before Ray
    has failed any trial for the node's death: a thread polls the processes every ``every_s``; and Tune's controller
    asks :meth:`check` before it acts on a trial's failure (:func:`~study.runtime.compat.before_trial_failure`), so a
    trial that failed with the node is never told to the searcher (Optuna FAIL, a table's replacement) nor to MLflow
    (FAILED). Ray's last experiment snapshot then holds it unfinished, and ``--resume`` continues it from its
    checkpoint: one trial, in Optuna, MLflow and the searcher.
    """

    def __init__(self, processes: dict[str, Any], end: Callable[[str], None], every_s: float = 0.5) -> None:
        self.processes = processes
        self.end = end
        self.every_s = every_s
        self._stopped = threading.Event()

    @classmethod
    def of_this_driver(cls, end: Callable[[str], None]) -> PrivateRayWatch | None:
        """The watch of the local instance this driver's ``ray.init`` started, started; ``None`` when it started none."""
        processes = private_node_processes()
        return cls(processes, end).start() if processes else None

    def start(self) -> PrivateRayWatch:
        before_trial_failure(self.check)
        threading.Thread(target=self._run, name="private-ray-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop watching: the driver shuts its Ray down."""
        self._stopped.set()
        before_trial_failure(None)

    def died(self) -> str | None:
        """What of the instance died (``raylet pid 123 was killed by SIGKILL``), or ``None`` while it all runs."""
        for name, process in self.processes.items():
            code = process.poll()
            if code is not None:
                return f"{name} pid {process.pid} {exit_phrase(code)}"
        return None

    def check(self) -> None:
        """End the driver now when the instance died (any thread)."""
        if not self._stopped.is_set() and (what := self.died()) is not None:
            self._stopped.set()
            node = "the warm Ray head (dmlstudy up)" if watching_attached() else "the study's private Ray node"
            self.end(f"{node} died ({what})")

    def _run(self) -> None:
        while not self._stopped.wait(self.every_s):
            self.check()

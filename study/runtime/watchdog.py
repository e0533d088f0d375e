"""Nothing waits silently: a study whose trials can get no resources fails with one line.

Ray Tune waits forever for resources no node has ("No available node types can fulfill resource request"): on a
local instance :func:`check_resources` refuses such a spec before any trial starts; on a cluster, where an
autoscaler may still add a node, :class:`PendingTimeout` fails the study once no trial has run for
``--pending-timeout`` seconds while some wait.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from trainables.schema.errors import SpecError, StudyStalledError

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

    from trainables.schema.spec import StudySpec

__all__ = ["PendingTimeout", "check_local_resources", "check_cluster_resources"]


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


class PendingTimeout(Callback):
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

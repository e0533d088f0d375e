"""Ray nodes started as users start them (``ray start --block``, one session per node) and ended as a machine
vanishes: the node's process group and every descendant, by PID (never ``ray stop``, which ends every Ray on the
machine). Shared by the CLI cluster test, the deployment test and ``benchmarks.cluster_faults``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RAY", "descendants", "kill_node", "process_name", "start_node", "is_trial"]

RAY = str(Path(sys.executable).with_name("ray"))


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def kill_node(proc: subprocess.Popen, grace: float = 0.0) -> list[str]:
    """End one node: its ``ray start`` session's process group and every descendant (raylet, workers), found before
    the first signal (once ``ray start`` is gone they belong to init). ``grace``: SIGTERM first, SIGKILL after that
    many seconds. Returns the command names of what was signalled."""
    pids = descendants(proc.pid) | {proc.pid}
    names = sorted(process_name(pid) for pid in pids)
    for sig in (signal.SIGTERM, signal.SIGKILL) if grace else (signal.SIGKILL,):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace or 30)
    return names


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").rsplit("/", 1)[-1]
    except OSError:
        return "?"


def start_node(
    args: list[str], env: dict[str, str], popen: Callable[..., subprocess.Popen[Any]] = subprocess.Popen
) -> subprocess.Popen:
    """``ray start ARGS --block`` at 127.0.0.1 in its own session; returns once the node runs."""
    proc = popen(
        [RAY, "start", *args, "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # ``--block`` prints this once the node runs, then blocks
        if "Ray runtime started" in line:
            return proc
    raise AssertionError(f"ray start {args} exited with {proc.wait()}")


def is_trial(pid: int) -> bool:
    """Whether ``pid`` is a Ray Tune trial's worker process (a function trainable's actor)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::ImplicitFunc")
    except OSError:
        return False

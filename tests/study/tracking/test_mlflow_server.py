"""``python -m study.mlflow_server`` ends its whole server (``mlflow server``, uvicorn, the job runner) when it is
signalled or its parent dies: afterwards no process of it is left and the port is free for a restart. By default it
listens on loopback only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.sockets import is_loopback, sockets_of
from study.tracking.server import free_port

pytestmark = pytest.mark.e2e


def _descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (read from /proc, zombies excluded)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _serves(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _hangup_by_default() -> None:
    """Run in the child before exec: these tests are about an attached server, so SIGHUP must not arrive ignored
    from whatever started pytest (``nohup`` makes the CLI a detached server that ignores hangups and outlives its
    parent, by design)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start(directory: Path, port: int, via_parent: bool = False) -> tuple[subprocess.Popen, int]:
    """The CLI (``via_parent``: under an intermediate ``sh`` that waits for it); returns (top process, CLI pid)
    once the CLI says it serves."""
    cmd = [sys.executable, "-m", "study.mlflow_server", str(directory), "--port", str(port)]
    if via_parent:
        cmd = ["sh", "-c", '"$@" & echo "cli $!"; wait', "sh", *cmd]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_hangup_by_default,  # noqa: PLW1509 - a single-threaded test process
    )
    cli = proc.pid
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("cli "):
            cli = int(line.split()[1])
        if line.startswith("MLflow server for"):
            break
        assert time.monotonic() < deadline, "the server did not start"
    assert _serves(port)
    return proc, cli


def _wait_gone(pids: set[int], port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (_alive(pids) or _serves(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(pids)
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left running: {sorted(left)}"
    assert not _serves(port)


def test_a_signal_ends_the_whole_server_and_the_port_can_be_reused(tmp_path):
    port = free_port()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # each later start reuses the port the one before freed
        proc, cli = _start(tmp_path / "mlflow", port)
        tree = _descendants(cli) | {cli}
        assert len(tree) >= 3, tree  # the CLI, mlflow server, its uvicorn worker
        listeners = [s for s in sockets_of(tree) if s.listening]  # by default the server is this machine's only
        assert listeners and all(is_loopback(s.local_host) for s in listeners), listeners
        os.kill(cli, sig)
        assert proc.wait(60) == 0
        _wait_gone(tree, port)
    proc, cli = _start(tmp_path / "mlflow", port)
    tree = _descendants(cli) | {cli}
    os.kill(cli, signal.SIGINT)  # Ctrl-C
    proc.wait(60)
    _wait_gone(tree, port)


def test_the_death_of_its_parent_or_a_sigkill_ends_the_server(tmp_path):
    port = free_port()
    proc, cli = _start(tmp_path / "mlflow", port, via_parent=True)
    tree = _descendants(proc.pid)
    assert cli in tree and len(tree) >= 3, tree
    os.kill(proc.pid, signal.SIGKILL)  # the parent shell dies; the CLI is reparented and must notice
    proc.wait()
    _wait_gone(tree, port)
    proc, cli = _start(tmp_path / "mlflow", port)
    tree = _descendants(cli)
    os.kill(cli, signal.SIGKILL)  # no handler runs: the server's own parent-death signal ends it
    proc.wait()
    _wait_gone(tree, port)

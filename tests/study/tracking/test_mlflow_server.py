"""``python -m study.commands.mlflow_server`` ends its whole server (``mlflow server``, uvicorn, the job runner) when it is
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


def _launch(directory: Path, port: int, via_parent: bool = False) -> subprocess.Popen:
    """The CLI (``via_parent``: under an intermediate ``sh`` that waits for it). Started from the main thread: the
    CLI asks for its parent's death signal, and Linux sends it when the *thread* that forked it ends."""
    cmd = [sys.executable, "-m", "study.commands.mlflow_server", str(directory), "--port", str(port)]
    if via_parent:
        cmd = ["sh", "-c", '"$@" & echo "cli $!"; wait', "sh", *cmd]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_hangup_by_default,  # noqa: PLW1509 - forked from the main thread, nothing else runs Python here
    )


def _serving(proc: subprocess.Popen, port: int) -> tuple[subprocess.Popen, int]:
    """(top process, CLI pid) once the CLI says it serves."""
    cli, said = proc.pid, []
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        said.append(line)
        if line.startswith("cli "):
            cli = int(line.split()[1])
        if line.startswith("MLflow server for"):
            break
        assert time.monotonic() < deadline, "the server did not start"
    assert _serves(port), "".join(said)[-3000:]
    return proc, cli


def _start(directory: Path, port: int, via_parent: bool = False) -> tuple[subprocess.Popen, int]:
    return _serving(_launch(directory, port, via_parent), port)


def _wait_gone(pids: set[int], port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (_alive(pids) or _serves(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(pids)
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left running: {sorted(left)}"
    assert not _serves(port)


def _start_both(directory: Path, ports: tuple[int, int], via_parent: bool = False):
    """Two servers started at the same time (the first under a parent shell if ``via_parent``): a start is mostly
    the server's imports, and the ends a test checks need not wait for each other."""
    one = _launch(directory / "one", ports[0], via_parent)
    two = _launch(directory / "two", ports[1])
    return _serving(one, ports[0]), _serving(two, ports[1])


def _free_for_a_restart(port: int) -> None:
    """What a restart needs of the port: a listening socket binds it (as the server's does, with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_signal_ends_the_whole_server_and_the_port_can_be_reused(tmp_path):
    ports = free_port(), free_port()
    started = _start_both(tmp_path, ports)
    for (proc, cli), port, sig in zip(started, ports, (signal.SIGTERM, signal.SIGHUP)):
        tree = _descendants(cli) | {cli}
        assert len(tree) >= 3, tree  # the CLI, mlflow server, its uvicorn worker
        listeners = [s for s in sockets_of(tree) if s.listening]  # by default the server is this machine's only
        assert listeners and all(is_loopback(s.local_host) for s in listeners), listeners
        os.kill(cli, sig)
        assert proc.wait(60) == 0
        _wait_gone(tree, port)
        _free_for_a_restart(port)
    proc, cli = _start(tmp_path / "one", ports[0])  # a restart on the port the SIGTERM freed
    tree = _descendants(cli) | {cli}
    os.kill(cli, signal.SIGINT)  # Ctrl-C
    proc.wait(60)
    _wait_gone(tree, ports[0])


def test_the_death_of_its_parent_or_a_sigkill_ends_the_server(tmp_path):
    ports = free_port(), free_port()
    (orphan, orphan_cli), (proc, cli) = _start_both(tmp_path, ports, via_parent=True)
    orphan_tree, tree = _descendants(orphan.pid), _descendants(cli)
    assert orphan_cli in orphan_tree and len(orphan_tree) >= 3, orphan_tree
    os.kill(orphan.pid, signal.SIGKILL)  # the parent shell dies; the CLI is reparented and must notice
    os.kill(cli, signal.SIGKILL)  # no handler runs: the server's own parent-death signal ends it
    orphan.wait()
    proc.wait()
    _wait_gone(orphan_tree, ports[0])
    _wait_gone(tree, ports[1])

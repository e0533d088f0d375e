"""A local MLflow tracking server for a study: sqlite backend, artifacts served from a directory.

``with serve(DIR) as server: server.uri`` for the length of a block, :func:`start_server` for longer; its command
line is :mod:`study.commands.mlflow_server` (``dmlstudy mlflow-server DIR``). The server runs in its own process group, so
:meth:`MlflowServer.stop` ends ``mlflow server`` and the uvicorn and job-runner processes it forks, and with
``die_with_parent`` a :mod:`study.tracking.reaper` ends that group however this process ends. It binds to 127.0.0.1
unless told otherwise: the server has no authentication. This module runs ``mlflow server`` as a subprocess and does
not import mlflow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainables.schema import record as R

__all__ = ["MlflowServer", "start_server", "serve", "free_port"]


@dataclass
class MlflowServer:
    """A running ``mlflow server`` process and where it listens."""

    process: subprocess.Popen
    host: str
    port: int
    directory: Path
    #: Ends the server's process group once this process is gone (see ``start_server(die_with_parent=True)``).
    reaper: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 20) -> None:
        """Stop the server and the workers it forked (it runs in its own process group)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.reaper is not None and self.reaper.poll() is None:
            self.reaper.stdin.close()  # type: ignore[union-attr]  # EOF: the reaper finds the group gone and exits
            self.reaper.wait()


def _start_reaper(pgid: int) -> subprocess.Popen:
    """A :mod:`study.tracking.reaper` for the server's process group (why a process: see that module)."""
    return subprocess.Popen(
        [sys.executable, "-m", "study.tracking.reaper", str(pgid)],
        stdin=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_server(
    directory: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout: float = 120,
    die_with_parent: bool = False,
) -> MlflowServer:
    """Start ``mlflow server`` over ``directory`` (``mlflow.db`` + ``artifacts/``); return once it answers.

    Args:
        directory: where the sqlite store and the served artifacts live (created if missing).
        host: interface to bind; 127.0.0.1 keeps the unauthenticated server off the network.
        port: TCP port; 0 picks a free one.
        timeout: seconds to wait for ``/health``.
        die_with_parent: the server's whole process group ends when this process ends, however it ends (SIGKILL
            included): a small reaper process waits for this one's end of a pipe to close. The command line sets it.
    """
    directory = Path(directory).expanduser().resolve()
    (directory / R.SERVER_ARTIFACTS_DIR).mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    log = open(directory / R.SERVER_LOG, "ab")  # noqa: SIM115 - the server process owns it from here
    process = subprocess.Popen(
        _server_argv(directory, host, port),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = MlflowServer(process, host, port, directory)
    if die_with_parent:
        server.reaper = _start_reaper(process.pid)
    try:
        answered = _wait_healthy(server, timeout)
    except BaseException:  # a signal while starting: take the half-started server down with us
        server.stop()
        raise
    if answered:
        return server
    server.stop()
    raise TimeoutError(f"mlflow server on {server.uri} did not answer within {timeout:.0f} s")


def _server_argv(directory: Path, host: str, port: int) -> list[str]:
    """``mlflow server`` over ``directory``'s sqlite store, serving the artifacts under it, with one worker."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        R.sqlite_uri(directory / R.MLFLOW_DB),
        "--artifacts-destination",
        str(directory / R.SERVER_ARTIFACTS_DIR),
        "--serve-artifacts",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def _wait_healthy(server: MlflowServer, timeout: float) -> bool:
    """Whether the server's ``/health`` answered within ``timeout`` s; :class:`RuntimeError` if the server exits."""
    process, deadline = server.process, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {process.returncode}; see {server.directory / R.SERVER_LOG}")
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    return False


@contextlib.contextmanager
def serve(directory: str | Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[MlflowServer]:
    """``with serve(dir) as server: ...`` — a server for the duration of the block."""
    server = start_server(directory, host, port)
    try:
        yield server
    finally:
        server.stop()

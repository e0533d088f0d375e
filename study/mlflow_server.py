"""Start a local MLflow tracking server for a study: sqlite backend, artifacts served from a directory.

    python -m study.mlflow_server DIR [--host 127.0.0.1] [--port 5000]

prints the ``tracking.uri`` to put in the spec (``http://HOST:PORT``) and serves until interrupted. It
binds to 127.0.0.1 unless ``--host`` says otherwise: the server has no authentication, so exposing it to
a cluster network (``--host 0.0.0.0``) is a deliberate choice. For a real cluster use a Postgres backend
(docs/cluster.md). This module runs ``mlflow server`` as a subprocess and does not import mlflow.
"""

from __future__ import annotations

import argparse
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

__all__ = ["MlflowServer", "start_server", "serve", "main"]


@dataclass
class MlflowServer:
    """A running ``mlflow server`` process and where it listens."""

    process: subprocess.Popen
    host: str
    port: int
    directory: Path

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


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_server(directory: str | Path, host: str = "127.0.0.1", port: int = 0, timeout: float = 120) -> MlflowServer:
    """Start ``mlflow server`` over ``directory`` (``mlflow.db`` + ``artifacts/``); return once it answers.

    Args:
        directory: where the sqlite store and the served artifacts live (created if missing).
        host: interface to bind; 127.0.0.1 keeps the unauthenticated server off the network.
        port: TCP port; 0 picks a free one.
        timeout: seconds to wait for ``/health``.
    """
    directory = Path(directory).expanduser().resolve()
    (directory / "artifacts").mkdir(parents=True, exist_ok=True)
    port = port or _free_port(host)
    log = open(directory / "server.log", "ab")  # noqa: SIM115 - the server process owns it from here
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{directory / 'mlflow.db'}",
        "--artifacts-destination",
        str(directory / "artifacts"),
        "--serve-artifacts",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = MlflowServer(process, host, port, directory)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {process.returncode}; see {directory / 'server.log'}")
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    server.stop()
    raise TimeoutError(f"mlflow server on {server.uri} did not answer within {timeout:.0f} s")


@contextlib.contextmanager
def serve(directory: str | Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[MlflowServer]:
    """``with serve(dir) as server: ...`` — a server for the duration of the block."""
    server = start_server(directory, host, port)
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m study.mlflow_server", description=__doc__.splitlines()[0])
    p.add_argument("directory", help="where mlflow.db and artifacts/ live")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000)
    args = p.parse_args(argv)
    server = start_server(args.directory, args.host, args.port)
    print(f"MLflow server for {server.directory} at {server.uri}")
    print(f"  in the spec:  tracking: {{uri: {server.uri}}}")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

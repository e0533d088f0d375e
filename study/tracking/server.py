"""Start a local MLflow tracking server for a study: sqlite backend, artifacts served from a directory.

    python -m study.tracking.server DIR [--host 127.0.0.1] [--port 5000]

prints the ``tracking.uri`` to put in the spec (``http://HOST:PORT``) and serves until interrupted. SIGTERM,
SIGINT and SIGHUP end the whole server (``mlflow server`` and the uvicorn and job-runner processes it forks, one
process group), and so does the death of this command's parent (Linux: ``PR_SET_PDEATHSIG``), so a supervisor's
``kill`` leaves no process serving the port. Started under ``nohup`` it outlives its terminal (no hangup, no
parent watch); even then SIGKILL of this command ends the server it started. It
binds to 127.0.0.1 unless ``--host`` says otherwise: the server has no authentication, so exposing it to
a cluster network (``--host 0.0.0.0``) is a deliberate choice. For a real cluster use a Postgres backend
(docs/cluster.md). This module runs ``mlflow server`` as a subprocess and does not import mlflow.
"""

from __future__ import annotations

import contextlib
import ctypes
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
from types import FrameType

from study.arguments import ArgumentParser
from trainables.schema import record as R

__all__ = ["MlflowServer", "start_server", "serve", "main", "free_port"]


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


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent exits (elsewhere: nothing).

    The parent is the *thread* that forked this process; a parent gone while the request is made is caught by
    comparing ``getppid`` before and after (then ``sig`` is sent at once). One gone before (a ``( cmd & )`` subshell)
    cannot be told from a process started by init (systemd), so neither is signalled.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


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
    cmd = [
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
    process = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = MlflowServer(process, host, port, directory)
    if die_with_parent:
        server.reaper = _start_reaper(process.pid)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {process.returncode}; see {directory / R.SERVER_LOG}")
            try:
                with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return server
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
    except BaseException:  # a signal while starting: take the half-started server down with us
        server.stop()
        raise
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


def main(argv: list[str] | None = None, prog: str = "python -m study.tracking.server") -> int:
    p = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("directory", help="where mlflow.db and artifacts/ live")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000)
    args = p.parse_args(argv)
    # Under ``nohup`` (SIGHUP ignored) the server is meant to outlive its terminal: then neither a hangup nor the
    # parent's death stops it. Otherwise a supervisor or shell that dies takes the server with it.
    detached = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    for sig in (signal.SIGTERM, signal.SIGINT) if detached else (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    # One try around everything after the handlers are set: a signal that lands while the banner is printed (a
    # supervisor that signals as soon as it reads the first line) is a clean stop, not a traceback and exit 1.
    server: MlflowServer | None = None
    try:
        if not detached:
            _die_with_parent()
        server = start_server(args.directory, args.host, args.port, die_with_parent=True)
        print(f"MLflow server for {server.directory} at {server.uri}", flush=True)
        print(f"  in the spec:  tracking: {{uri: {server.uri}}}", flush=True)
        code = server.process.wait()
    except _Stopped:
        code = 0
    finally:
        if server is not None:
            server.stop()
    return code


class _Stopped(BaseException):  # noqa: N818 - not an error: a signal asked the server to stop
    """Raised in the main thread by SIGTERM, SIGINT or SIGHUP."""


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not interrupt the shutdown
    raise _Stopped


if __name__ == "__main__":
    sys.exit(main())

"""Start a local MLflow tracking server for a study: sqlite backend, artifacts served from a directory.

    python -m study.commands.mlflow_server DIR [--host 127.0.0.1] [--port 5000]      (dmlstudy mlflow-server DIR)

prints the ``tracking.uri`` to put in the spec (``http://HOST:PORT``) and serves until interrupted. SIGTERM,
SIGINT and SIGHUP end the whole server (``mlflow server`` and the uvicorn and job-runner processes it forks, one
process group), and so does the death of this command's parent (Linux: ``PR_SET_PDEATHSIG``), so a supervisor's
``kill`` leaves no process serving the port. Started under ``nohup`` it outlives its terminal (no hangup, no
parent watch); even then SIGKILL of this command ends the server it started. It
binds to 127.0.0.1 unless ``--host`` says otherwise: the server has no authentication, so exposing it to
a cluster network (``--host 0.0.0.0``) is a deliberate choice. For a real cluster use a Postgres backend
(docs/notebook/cluster.md). The server itself, and its use from Python (``serve``), is :mod:`study.tracking.server`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType

from study.arguments import ArgumentParser
from study.tracking.server import MlflowServer, start_server

__all__ = ["main"]

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


def main(argv: list[str] | None = None, prog: str = "python -m study.commands.mlflow_server") -> int:
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

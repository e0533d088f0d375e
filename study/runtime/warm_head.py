"""A warm local Ray head for repeated studies: ``dmlstudy up`` starts one, studies attach with ``--address warm``,
``dmlstudy down`` stops it.

Why: a small study is mostly start-up, and about 8 s of it is Ray's own (a new local instance, its first worker,
its shutdown: docs/notebook/performance.md). A head that outlives the study skips starting and stopping the instance.

The head is the study's own private instance made long-lived, with the same guarantees:

- **Loopback only.** A detached *holder* process (``python -m study.runtime.warm_head --hold DIR``, in a session of
  its own) calls ``ray.init()`` under :func:`~study.runtime.ray_node.loopback_local_instance` and
  :func:`~study.runtime.ray_node.own_session_local_instance`, exactly as a study's private start does: node address
  127.0.0.1 and every listener on loopback. (``ray start --head --node-ip-address 127.0.0.1`` does not: Ray rewrites
  that address to the machine's network address.) A driver attaching runs ``ray.init`` under the same loopback
  setting, or Ray would rewrite the head's ``127.0.0.1`` address the same way and never reach it.
- **Token authentication.** ``up`` writes a fresh token to ``DIR/token`` (mode 0600, the directory 0700); the head
  and every driver that attaches read it through ``RAY_AUTH_TOKEN_PATH``. Nothing prints it.
- **Its processes and only them.** The holder's Ray processes share its fate (Ray's ``PR_SET_PDEATHSIG``): ``down``
  sends the holder SIGTERM (it shuts Ray down), then SIGKILLs by PID what is left: the processes recorded in
  ``DIR/head.json`` (each checked against its recorded start time) and those started in the head's own temp dir. An
  ``up`` after a head died does the same to what is left of it. Neither runs ``ray stop``.
- **A head that dies mid-study ends the study with exit 3.** The driver watches the head's GCS and raylet as it
  watches a private instance's (:class:`HeadProcess` for :class:`~study.runtime.watchdog.PrivateRayWatch`), so the
  study stops with its one line and ``--resume`` continues it on a new head: ``--address warm`` names whichever head
  runs now.

State lives in one per-user directory (:func:`head_dir`: ``$DMLSTUDY_HEAD_DIR``, else
``$XDG_RUNTIME_DIR/dmlstudy-head``, else ``~/.cache/dmlstudy/head``); Ray's own files in a short temp dir of their
own (``RAY_TMPDIR``: Ray's socket paths must stay under 108 bytes), removed by ``down``.

What stays warm, and what cannot: the instance (GCS, raylet, agents, the driver's connection: ``ray.init`` takes
~0.4 s instead of 3-7 s, and there is no ``ray.shutdown`` at the end). The trial's worker process cannot: Ray gives each
job (each study's driver) worker processes of its own, and Ray Tune creates every trainable actor with a runtime
environment of its own (``env_vars``: ``PL_DISABLE_FORK``, ``ray.tune.execution.class_cache``), so the raylet never
hands it one of its prestarted idle workers; each study's first trial starts a new worker that imports torch again.
Measured in docs/notebook/performance.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from study.runtime.ray_node import (
    WORKER_ENV,
    loopback_local_instance,
    own_session_local_instance,
    private_node_processes,
)
from trainables.schema.errors import StudyError

__all__ = [
    "HEAD_DIR_ENV",
    "WARM_ADDRESS",
    "ATTACH_LINE",
    "HeadState",
    "HeadProcess",
    "head_dir",
    "read_state",
    "running",
    "resolve",
    "attach_env",
    "head_processes",
    "start_head",
    "stop_head",
]

#: The environment variable that names the head's state directory (tests point it at their own).
HEAD_DIR_ENV = "DMLSTUDY_HEAD_DIR"
#: The ``--address`` value that names the warm head, whichever one runs now (its port changes with each ``up``).
WARM_ADDRESS = "warm"
#: What ``up`` prints last: the argument a study passes to attach.
ATTACH_LINE = f"--address {WARM_ADDRESS}"
STATE_FILE = "head.json"
TOKEN_FILE = "token"
LOG_FILE = "head.log"
ENDED_FILE = "ended.json"
START_TIMEOUT_S = 180.0
STOP_GRACE_S = 30.0


def head_dir(environ: dict[str, str] | None = None) -> Path:
    """The per-user directory of the warm head's state: ``$DMLSTUDY_HEAD_DIR``, else ``$XDG_RUNTIME_DIR/dmlstudy-head``
    (a tmpfs only this user reads), else ``~/.cache/dmlstudy/head``."""
    env = os.environ if environ is None else environ
    if env.get(HEAD_DIR_ENV):
        return Path(env[HEAD_DIR_ENV])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "dmlstudy-head"
    return Path.home() / ".cache" / "dmlstudy" / "head"


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22), ``None`` when it is gone or
    a zombie: with the PID it names one process, never a later one that reuses the number."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclasses.dataclass(frozen=True)
class HeadState:
    """``head.json``: the head's GCS address, its holder and Ray processes (name → ``[pid, start ticks]``) and temp dir."""

    directory: Path
    address: str
    pid: int
    ticks: int
    ray_tmpdir: str
    processes: dict[str, list[int]]

    @property
    def token_file(self) -> Path:
        return self.directory / TOKEN_FILE

    def alive(self) -> bool:
        """Whether the holder still runs (the same process that wrote the state)."""
        return start_ticks(self.pid) == self.ticks

    def watched(self) -> dict[str, HeadProcess]:
        """The head's GCS and raylet as a driver watches them (``Popen``-like: ``pid``, ``poll()``)."""
        return {name: HeadProcess(pid, ticks, self) for name, (pid, ticks) in self.processes.items()}

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("directory")
        return json.dumps(data)


class HeadProcess:
    """A process of the warm head, seen from a driver that did not start it, shaped like the ``subprocess.Popen`` of a
    private instance's process (``pid``, ``poll()``) for :class:`~study.runtime.watchdog.PrivateRayWatch`.

    ``poll()`` is ``None`` while the process runs. Once it is gone: the exit code the holder recorded (the holder is
    its parent and sees it); or, when the holder is gone too, ``-SIGKILL``, the signal Ray's fate sharing
    (``PR_SET_PDEATHSIG``) sends its processes when the holder dies; ``None`` while the holder has yet to record it.
    """

    def __init__(self, pid: int, ticks: int, head: HeadState) -> None:
        self.pid = pid
        self.ticks = ticks
        self.head = head

    def poll(self) -> int | None:
        if start_ticks(self.pid) == self.ticks:
            return None
        recorded = _ended(self.head.directory).get(str(self.pid))
        if recorded is not None:
            return int(recorded)
        return None if self.head.alive() else -int(signal.SIGKILL)


def _ended(directory: Path) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads((directory / ENDED_FILE).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def read_state(directory: Path | None = None) -> HeadState | None:
    """The state a head wrote in ``directory`` (default :func:`head_dir`), alive or not; ``None`` without one."""
    directory = head_dir() if directory is None else directory
    try:
        data = json.loads((directory / STATE_FILE).read_text())
        return HeadState(directory=directory, **data)
    except (OSError, ValueError, TypeError):
        return None


def running(directory: Path | None = None) -> HeadState | None:
    """The warm head that runs now, or ``None``."""
    state = read_state(directory)
    return state if state is not None and state.alive() else None


def resolve(address: str) -> HeadState | None:
    """The warm head a driver's ``--address`` names: ``warm``, or the running head's own ``host:port``; ``None`` for any
    other address. Raises :class:`StudyError` for ``warm`` when no head runs."""
    head = running()
    if address == WARM_ADDRESS and head is None:
        raise StudyError(
            f"no warm Ray head runs (state in {head_dir()}): start one with `dmlstudy up`, or leave out "
            "--address for a private Ray of the study's own"
        )
    return head if head is not None and address in (WARM_ADDRESS, head.address) else None


def attach_env(head: HeadState, environ: dict[str, str] | None = None) -> None:
    """Give this driver the head's token (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``): the head has its own,
    written by ``up``; a ``RAY_AUTH_TOKEN`` meant for another cluster would otherwise take precedence."""
    env = os.environ if environ is None else environ
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN_PATH"] = str(head.token_file)
    env.pop("RAY_AUTH_TOKEN", None)


# ---- the holder: the process that keeps the head's Ray instance ----


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by this user only (0600) from its first byte, atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _record_ended(directory: Path, processes: dict[str, Any]) -> None:
    """Record the exit code of each of the head's processes that has ended (for the drivers' watch)."""
    codes = {str(p.pid): code for p in processes.values() if (code := p.poll()) is not None}
    if codes:
        _write_private(directory / ENDED_FILE, json.dumps(_ended(directory) | codes))


def _hold(directory: Path) -> int:
    """The holder's life: start the head's instance, publish ``head.json``, wait for SIGTERM/SIGINT or the death of its
    GCS or raylet, record how they ended, shut Ray down and clean up."""
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(directory / TOKEN_FILE)})
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.pop("RAY_ADDRESS", None)
    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    import ray

    with loopback_local_instance(), own_session_local_instance():
        ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    processes = private_node_processes()
    state = HeadState(
        directory=directory,
        address=ray.get_runtime_context().gcs_address,
        pid=os.getpid(),
        ticks=start_ticks(os.getpid()) or 0,
        ray_tmpdir=os.environ.get("RAY_TMPDIR", ""),
        processes={name: [p.pid, start_ticks(p.pid) or 0] for name, p in processes.items()},
    )
    _write_private(directory / STATE_FILE, state.to_json())
    print(f"warm head at {state.address}, pid {state.pid}", flush=True)
    while not stop.wait(0.5):
        if any(p.poll() is not None for p in processes.values()):
            print("a process of the head ended: the head ends", flush=True)
            break
    _record_ended(directory, processes)
    with contextlib.suppress(OSError):
        (directory / STATE_FILE).unlink()
    ray.shutdown()
    _record_ended(directory, processes)
    return 0


# ---- up and down ----


def _same(pid: int, ticks: int) -> bool:
    return ticks > 0 and start_ticks(pid) == ticks


def head_processes(ray_tmpdir: str) -> list[int]:
    """Every process of this user started with ``RAY_TMPDIR=ray_tmpdir``: a head's temp dir is its own (``mkdtemp``),
    so these are the head's holder, Ray processes, agents and workers, and nothing else."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RAY_TMPDIR={ray_tmpdir}".encode() in environ:
                found.append(int(entry.name))
    return found


def _kill_leftovers(state: HeadState) -> None:
    """SIGKILL what is left of a head, by PID: its recorded processes (each checked against its start time), and
    those started in its temp dir (its agents, which outlive a killed raylet while they try to report to its GCS)."""
    for pid, ticks in [(state.pid, state.ticks), *state.processes.values()]:
        if _same(pid, ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for pid in head_processes(state.ray_tmpdir) if state.ray_tmpdir else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _clear(directory: Path, state: HeadState | None) -> None:
    """Remove a head's state files and its Ray temp dir (after it ended)."""
    for name in (STATE_FILE, TOKEN_FILE, ENDED_FILE):
        with contextlib.suppress(OSError):
            (directory / name).unlink()
    if state is not None and state.ray_tmpdir:
        shutil.rmtree(state.ray_tmpdir, ignore_errors=True)


def start_head(directory: Path, timeout_s: float = START_TIMEOUT_S) -> tuple[HeadState, bool]:
    """The running head, or a new one started in ``directory``; the flag says whether it was already running."""
    head = running(directory)
    if head is not None:
        return head, True
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    stale = read_state(directory)
    if stale is not None:
        _kill_leftovers(stale)
    _clear(directory, stale)
    _write_private(directory / TOKEN_FILE, secrets.token_hex(32))
    ray_tmp = tempfile.mkdtemp(prefix="dmlhead", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    with open(directory / LOG_FILE, "ab") as log:
        holder = subprocess.Popen(
            [sys.executable, "-m", "study.runtime.warm_head", "--hold", str(directory)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while (head := running(directory)) is None:
        if holder.poll() is not None or time.monotonic() > deadline:
            _kill_holder(holder)
            shutil.rmtree(ray_tmp, ignore_errors=True)
            why = f"it exited with {holder.returncode}" if holder.returncode is not None else f"not in {timeout_s:g} s"
            raise StudyError(f"the warm Ray head did not start ({why}); see {directory / LOG_FILE}")
        time.sleep(0.2)
    return head, False


def _kill_holder(holder: subprocess.Popen[bytes]) -> None:
    """End a holder that failed to start, and its session (the Ray processes it may have started), by PID."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()


def stop_head(directory: Path, grace_s: float = STOP_GRACE_S) -> HeadState | None:
    """Stop the head of ``directory``: SIGTERM to its holder, then after ``grace_s`` SIGKILL to whatever of its recorded
    processes is left; its state and temp dir removed. Returns the stopped head, ``None`` when none ran."""
    state = read_state(directory)
    if state is None:
        return None
    if state.alive():
        os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while state.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    _kill_leftovers(state)
    _clear(directory, state)
    return state


if __name__ == "__main__":  # the holder itself, started by start_head: python -m study.runtime.warm_head --hold DIR
    if sys.argv[1:2] != ["--hold"] or len(sys.argv) != 3:
        sys.exit("usage: python -m study.runtime.warm_head --hold DIR (started by `dmlstudy up`)")
    sys.exit(_hold(Path(sys.argv[2])))

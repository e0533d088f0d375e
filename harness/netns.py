"""A private network namespace that several processes share, for tests whose servers must only ever see loopback.

Ray rewrites ``--node-ip-address 127.0.0.1`` to the machine's own network address when the machine has one, so a
multi-node test cluster started on a workstation talks over (and listens on) its real interface. Inside a fresh
network namespace loopback is the only interface, so every address Ray, PostgreSQL or MLflow picks is 127.0.0.1.

util-linux's ``unshare``/``nsenter`` do the work: a *holder* process (``sleep infinity`` under ``unshare --net``)
keeps the namespace alive, and each command runs inside it through ``nsenter --target HOLDER --net``. ``nsenter``
execs the command without forking (only ``--net`` is entered), so a ``Popen``'s PID is the command's own PID: end it
as usual. Python's ``os.setns`` could do the same from a ``preexec_fn``, but that runs Python between fork and exec
(unsafe with threads) and cannot compose with ``runuser``/``setpriv``; a plain argv prefix does.

Lifecycle::

    with NetNamespace() as ns:
        head = ns.popen(["ray", "start", "--head", ...], start_new_session=True)
        ns.run([sys.executable, "-c", "..."], check=True)
        ...                      # the caller ends head (and anything else it started in ns) here, by PID
    # leaving the block kills the holder only

Leaving the block kills only the holder, by its PID. Processes started inside keep running (a namespace lives as
long as any process is in it), so callers end their own processes first, inside the block.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ["NetNamespace", "netns_unavailable_reason"]

_TOOLS = ("unshare", "nsenter", "ip")
_READY = "netns-ready"


def netns_unavailable_reason() -> str | None:
    """``None`` when a private network namespace can be made here, else one line saying why not (for
    ``pytest.skip``): not root, a missing tool (util-linux's ``unshare``/``nsenter``, iproute2's ``ip``), or a
    trial ``unshare --net`` that fails (a container without ``CAP_SYS_ADMIN``, a seccomp profile)."""
    if os.geteuid() != 0:
        return "a private network namespace needs root (unshare --net, nsenter)"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"a private network namespace needs {', '.join(missing)} (util-linux, iproute2): not found on PATH"
    try:
        trial = subprocess.run(
            ["unshare", "--net", "--", "ip", "link", "set", "lo", "up"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare --net failed: {e}"
    if trial.returncode != 0:
        last = (trial.stderr.strip().splitlines() or [f"exit {trial.returncode}"])[-1]
        return f"unshare --net failed here: {last}"
    return None


class NetNamespace:
    """A network namespace whose only interface is loopback (up), held open by a ``sleep`` process.

    Attributes:
        pid: the holder's PID (``nsenter --target`` uses it); set on entering.
    """

    def __init__(self, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self._holder: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        if self._holder is None:
            raise RuntimeError("NetNamespace: not entered")
        return self._holder.pid

    def __enter__(self) -> NetNamespace:
        reason = netns_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        # The holder prints once loopback is up, then becomes ``sleep`` (exec: same PID, still in the namespace).
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", f"ip link set lo up && echo {_READY} && exec sleep infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C meant for pytest does not end the namespace under a running test
        )
        try:
            self._wait_ready()
        except BaseException:
            self._kill_holder()
            raise
        return self

    def _wait_ready(self) -> None:
        holder = self._holder
        assert holder is not None and holder.stdout is not None
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(holder.stdout, selectors.EVENT_READ)
            if not sel.select(self.start_timeout):
                raise RuntimeError(f"network namespace holder (PID {holder.pid}) not ready in {self.start_timeout} s")
        line = holder.stdout.readline().strip()
        if line != _READY:
            err = holder.stderr.read() if holder.poll() is not None and holder.stderr else ""
            raise RuntimeError(f"network namespace holder failed: {(err or line or 'no output').strip()}")
        if os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            raise RuntimeError("network namespace holder is still in this process's network namespace")

    def __exit__(self, *exc: object) -> None:
        self._kill_holder()

    def _kill_holder(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(10)
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run inside the namespace: ``nsenter --target PID --net -- *argv``. A plain prefix, so
        it composes with ``runuser -u postgres --`` or ``setpriv`` on either side."""
        return ["nsenter", "--target", str(self.pid), "--net", "--", *argv]

    def popen(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace (``subprocess.Popen``'s keyword arguments); its PID is the command's."""
        return subprocess.Popen(self.command(argv), **popen_kwargs)

    def run(self, argv: Sequence[str], **run_kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside the namespace to completion (``subprocess.run``'s keyword arguments)."""
        return subprocess.run(self.command(argv), **run_kwargs)

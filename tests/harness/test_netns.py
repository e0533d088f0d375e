"""``harness.netns.NetNamespace``: loopback is the only interface inside, a server there is out of the host's reach,
a command's PID is its own, and leaving ends the holder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import netns
from harness.netns import NetNamespace, netns_unavailable_reason

_REASON = netns_unavailable_reason()

_SERVER = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(b"inside"); c.close()
"""


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_a_namespace_has_only_loopback_and_its_servers_are_out_of_reach():
    with NetNamespace() as ns:
        holder = ns.pid
        addrs = ns.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        assert {line.split()[1] for line in addrs.splitlines()} == {"lo"}, addrs
        assert " 127.0.0.1/8 " in addrs

        server = ns.popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            # nsenter execs: the Popen's PID is the server itself, in the namespace, not in ours.
            assert b"python" in Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")[0]
            assert os.readlink(f"/proc/{server.pid}/ns/net") == os.readlink(f"/proc/{holder}/ns/net")
            assert os.readlink(f"/proc/{server.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the host's loopback is another loopback
            reply = ns.run(
                [
                    sys.executable,
                    "-c",
                    f"import socket; print(socket.create_connection(('127.0.0.1', {port})).recv(6))",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            assert reply.stdout.strip() == "b'inside'"
            assert server.wait(30) == 0
        finally:
            if server.poll() is None:
                server.kill()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{holder}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{holder}")


def test_the_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "root" in (netns_unavailable_reason() or "")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None if tool == "nsenter" else f"/usr/bin/{tool}")
    assert "nsenter" in (netns_unavailable_reason() or "")
    with pytest.raises(RuntimeError, match="nsenter"), NetNamespace():
        pass

"""The TCP/UDP sockets of a process tree, as ``ss`` (iproute2) reports them: for tests that assert what a running
study exposes to the network. ``ss`` already maps sockets to processes (``-p``); psutil would do the same but is
not a dependency of the project."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Socket", "process_tree", "sockets_of", "is_loopback", "host_addresses"]

_PID = re.compile(r'\("([^"]*)",pid=(\d+),')


@dataclass(frozen=True)
class Socket:
    """One line of ``ss -Htuanp``: protocol, state, local and peer address (``host:port``), owning processes."""

    proto: str
    state: str
    local: str
    peer: str
    owners: tuple[tuple[str, int], ...]

    @property
    def local_host(self) -> str:
        return _host(self.local)

    @property
    def peer_host(self) -> str:
        return _host(self.peer)

    @property
    def listening(self) -> bool:
        # UDP sockets have no LISTEN state: an unconnected bound one (UNCONN) receives from anyone, like a listener.
        return self.state in ("LISTEN", "UNCONN")


def _host(addr: str) -> str:
    host = addr.rsplit(":", 1)[0]
    return host.strip("[]").split("%", 1)[0]  # [::1]:80, fe80::1%eth0:80


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` and ``::ffff:127.x`` are loopback; ``*``, ``0.0.0.0`` and ``::`` (every interface)
    and any other address are not."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # "*": every interface
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def process_tree(root: int) -> set[int]:
    """``root`` and its descendants, plus every process of ``root``'s session (Ray's daemons outlive their parent
    and are reparented, but keep the session)."""
    parent: dict[int, int] = {}
    session: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[int(entry.name)], session[int(entry.name)] = int(fields[1]), int(fields[3])
    sid = session.get(root)
    tree = {root} | {pid for pid, s in session.items() if sid is not None and s == sid}
    grew = True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def sockets_of(pids: set[int]) -> list[Socket]:
    """Every TCP and UDP socket (listening or connected) some process in ``pids`` holds, from ``ss -Htuanp``."""
    out = subprocess.run(["ss", "-Htuanp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        owners = tuple((name, int(pid)) for name, pid in _PID.findall(line))
        if any(pid in pids for _, pid in owners):
            found.append(Socket(parts[0], parts[1], parts[4], parts[5], owners))
    return found


def host_addresses() -> set[str]:
    """This machine's non-loopback addresses (``ip -o addr``)."""
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    hosts = {line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3}
    return {h for h in hosts if not is_loopback(h)}

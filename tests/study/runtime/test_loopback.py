"""A local study (no ``--address``) opens nothing to the network: while it runs, every socket of the driver's
process tree (the driver, Ray's GCS, raylet, agents, trial workers) listens on and talks over loopback only, and Ray
took 127.0.0.1 as the node's address. Before ``study.runtime.ray_node.loopback_local_instance``, Ray's servers listened on
``*:port`` and every connection went over the machine's network address."""

from __future__ import annotations

import shutil
import tempfile
import time

import pytest
import yaml

from harness.driver import driver_env, kill_driver, start_driver, tiny_spec
from harness.sockets import host_addresses, is_loopback, process_tree, sockets_of

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) not found: it lists the study's sockets"),
]


def test_a_local_study_listens_and_talks_on_loopback_only(tmp_path):
    spec = tiny_spec("t_loopback", epochs=2)
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    ray_tmp = tempfile.mkdtemp(prefix="rl", dir="/tmp")
    proc = start_driver(tmp_path, driver_env(ray_tmp), "spec.yaml", "--no-dashboard")
    seen, started = set(), time.monotonic()
    try:
        while proc.poll() is None:  # sample the whole run: Ray's processes come and go
            seen.update(sockets_of(process_tree(proc.pid)))
            assert time.monotonic() - started < 600, "the study did not end"
            time.sleep(0.25)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            kill_driver(proc)
    assert proc.returncode == 0, out[-3000:]
    listeners = {s for s in seen if s.listening}
    owners = {name for s in listeners for name, _ in s.owners}
    assert {"gcs_server", "raylet"} <= owners, owners  # sampled while Ray ran, so the check below means something
    assert any(name.startswith("ray::") for name in owners), owners  # and a worker
    assert [s for s in listeners if not is_loopback(s.local_host)] == []
    connected = {s for s in seen if not s.listening}
    assert connected, "no connection between the study's processes was seen"
    assert [s for s in connected if not (is_loopback(s.local_host) and is_loopback(s.peer_host))] == []
    hosts = host_addresses()
    assert not any(s.peer_host in hosts or s.local_host in hosts for s in seen)

"""A cluster started as users start it: ``ray start --head`` and two ``ray start --address`` worker nodes, token
authentication on every node and the driver (Ray ≥ 2.59's default), the study run with ``--address
--shared-storage --max-failures 2``; one worker node is SIGKILLed mid-trial and nothing is lost. A driver without
the token gets one line and exit 2.

The nodes and the drivers run in a private network namespace (:class:`harness.netns.NetNamespace`) whose only
interface is loopback: outside one, Ray rewrites ``--node-ip-address 127.0.0.1`` to the machine's network address and
the cluster listens and talks on it. Inside, every node's address is 127.0.0.1 (asserted from ``ray.nodes()``). Where
no namespace can be made (not root, no ``unshare``), the test skips and says why.

Each node is a ``ray start --block`` process in its own session that this test owns: it ends each node's process
group and descendants by PID, never with ``ray stop`` (which would end every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from harness.driver import REPO, logged_epochs, mlflow_children, optuna_trials, tiny_spec
from harness.netns import NetNamespace, netns_unavailable_reason
from harness.ray_nodes import descendants, is_trial, kill_node, start_node
from study.tracking.server import free_port

pytestmark = pytest.mark.e2e


def _node(ns: NetNamespace, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return start_node(args, env, popen=ns.popen)


@pytest.fixture
def token_cluster():
    """A head (no CPUs: trials land on workers) and two one-CPU workers, token authentication on; yields
    ``(address, token env, namespace, [worker processes])``, all in a private network namespace."""
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env = {
        **base,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),  # in the environment: no ~/.ray/auth_token is written or read
        "PYTHONPATH": str(REPO),
        "RAY_TMPDIR": ray_tmp,
        # Declare a lost node dead within a few seconds instead of Ray's ~30 s.
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_failure_threshold": "3",
    }
    port = free_port()  # any port is free in a fresh namespace; this one is free here too
    nodes: list[subprocess.Popen] = []
    with NetNamespace() as ns:
        try:
            head = ["--head", "--port", str(port), "--num-cpus", "0", "--temp-dir", ray_tmp]
            head.append("--include-dashboard=false")
            nodes.append(_node(ns, head, env))
            for _ in range(2):
                nodes.append(_node(ns, ["--address", f"127.0.0.1:{port}", "--num-cpus", "1"], env))
            yield f"127.0.0.1:{port}", env, ns, nodes[1:]
        finally:
            for proc in reversed(nodes):  # before the namespace's holder goes
                # SIGTERM, then SIGKILL after 3 s (harness.deployment measured: the workers exit within 2 s, the head
                # not within 20 s): the head's 20 s of grace was a third of this test.
                kill_node(proc, grace=3)
            shutil.rmtree(ray_tmp, ignore_errors=True)


_NODE_ADDRESSES = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps(sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])))
"""


def test_a_token_cluster_loses_a_worker_node_and_nothing_is_lost(token_cluster, tmp_path):
    address, env, ns, workers = token_cluster
    epochs, num_trials = 5, 2
    spec = tiny_spec("t_cli_cluster", epochs=epochs, num_trials=num_trials, max_concurrent=2)
    spec["storage"] = str(tmp_path / "runs")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    study_dir = tmp_path / "runs" / "t_cli_cluster"

    # The nodes' addresses and a driver without the token, at the same time: both only read the cluster.
    no_token = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    args = [sys.executable, "-m", "study.run", "spec.yaml", "--address", address, "--shared-storage", "--no-dashboard"]
    with ThreadPoolExecutor(2) as pool:
        ask = [sys.executable, "-c", _NODE_ADDRESSES, address]
        asked = pool.submit(ns.run, ask, env=env, capture_output=True, text=True, timeout=180)
        no_auth = pool.submit(ns.run, args, cwd=tmp_path, env=no_token, capture_output=True, text=True, timeout=180)
        nodes, refused = asked.result(), no_auth.result()
    assert nodes.returncode == 0, nodes.stderr[-3000:]
    print(f"node addresses: {nodes.stdout.strip()}")
    assert json.loads(nodes.stdout.splitlines()[-1]) == ["127.0.0.1"] * 3
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.splitlines() == [refused.stderr.strip()], refused.stderr[-3000:]  # one line
    assert refused.stderr.startswith(f"error: cannot authenticate to the Ray cluster at {address}")
    assert "RAY_AUTH_TOKEN" in refused.stderr and not study_dir.exists()

    started = time.monotonic()
    proc = ns.popen(
        [*args, "--max-failures", "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while logged_epochs(study_dir, "t_cli_cluster") < 1:  # a trial is mid-way: it has reported an epoch
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() - started < 300, "no epoch was logged"
            time.sleep(0.2)
        victim = next(w for w in workers if any(is_trial(p) for p in descendants(w.pid)))
        killed = kill_node(victim)  # the whole node, as when a machine vanishes
        killed_at = time.monotonic() - started
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(
        f"worker node killed at {killed_at:.1f} s ({len(killed)} processes: {killed}); study done at {time.monotonic() - started:.1f} s"
    )
    assert proc.returncode == 0, err[-3000:]
    client, parents, children = mlflow_children(study_dir, "t_cli_cluster")
    assert len(children) == num_trials and all(r.info.status == "FINISHED" for r in [*parents, *children])
    for run in children:
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1"))
        assert steps == list(range(1, epochs + 1)), (run.info.run_id, steps)
        print(f"run {run.data.tags['trial_id']}: {run.info.status}, steps {steps}")
    trials = optuna_trials(study_dir, "t_cli_cluster")
    assert len(trials) == num_trials and all(t.state.name == "COMPLETE" for t in trials)

"""Multi-node: a simulated Ray cluster (``ray.cluster_utils.Cluster``: a head and two workers on this
machine, every node on 127.0.0.1), a worker lost mid-trial and the local-storage refusal. (Tracking through a real
MLflow server: tests/study/test_hardening.py::test_tracking_server_restart_mid_study_loses_nothing.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.driver import driver_env, mlflow_children, optuna_trials, start_driver, tiny_spec
from study.runtime.ray_node import loopback_local_instance

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(monkeypatch):
    """A head (no CPUs, so trials land on workers) and two one-CPU worker nodes, torn down afterwards.

    Every node takes 127.0.0.1 and listens on loopback only: the nodes start inside this (pytest's) process, which a
    private network namespace would have to move as a whole, so Ray's local-only switch stays on for the cluster's
    life instead (``study.runtime.ray_node.loopback_local_instance``; the drivers inherit its environment variable, so Ray does
    not rewrite their ``127.0.0.1:port`` to the machine's address either). ``test_ray_cli_cluster.py`` runs
    ``ray start`` nodes, which refuse that switch, in a namespace."""
    import ray
    from ray.cluster_utils import Cluster

    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with loopback_local_instance():
        c = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "include_dashboard": False,
                # Declare a lost node dead within a few seconds instead of Ray's ~30 s.
                "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
            },
        )
        try:
            workers = [c.add_node(num_cpus=1) for _ in range(2)]
            c.wait_for_nodes()
            assert [n.node_ip_address for n in c.list_all_nodes()] == ["127.0.0.1"] * 3
            assert c.address.startswith("127.0.0.1:"), c.address
            yield c, workers, ray_tmp
        finally:
            ray.shutdown()
            c.shutdown()
            shutil.rmtree(ray_tmp, ignore_errors=True)


def _spec(name: str, epochs: int, **extra: object) -> dict:
    return {**tiny_spec(name, epochs), **extra}


def test_local_storage_on_a_multi_node_cluster_exits_2(cluster, tmp_path):
    c, _, ray_tmp = cluster
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec("t_local", 1)))
    proc = subprocess.run(
        [sys.executable, "-m", "study.run", str(path), "--address", c.address],
        cwd=tmp_path,
        env=driver_env(ray_tmp),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "storage:" in proc.stderr and "3 nodes" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def _node_of(pid: int, workers: list) -> object:
    """The simulated node whose raylet is an ancestor of process ``pid``."""
    from ray._private import ray_constants

    ancestors: set[int] = set()
    while pid > 1:  # walk the parent chain through /proc (field 4 of /proc/PID/stat is the parent's pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        ancestors.add(pid)
    for node in workers:
        raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
        if raylet in ancestors:
            return node
    raise AssertionError(f"process {pid} runs on no worker node")


def _results(trial_dir: Path) -> list[dict]:
    path = trial_dir / "result.json"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_worker_lost_mid_trial_resumes_from_checkpoint_on_another_node(cluster, tmp_path):
    c, workers, ray_tmp = cluster
    epochs = 5
    spec = _spec("t_node", epochs)
    spec["train"]["batches_per_epoch"] = 40  # epoch 1 is seen and the process frozen well before epoch 5 ends
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = start_driver(
        tmp_path, driver_env(ray_tmp), str(path), "--address", c.address, "--shared-storage", "--max-failures", "2"
    )
    study_dir = tmp_path / "runs" / "t_node"
    try:
        deadline = time.monotonic() + 240
        rows: list[dict] = []
        while not rows:  # the first epoch is reported and checkpointed
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stdout.read()[-3000:] if proc.stdout else ""
            )
            trial_dirs = list((study_dir / "tune").glob("trial_*"))
            rows = _results(trial_dirs[0]) if trial_dirs and list(trial_dirs[0].glob("checkpoint_*")) else []
            time.sleep(0.2)
        # Freeze the trial's process before pulling its node, so it cannot run ahead (on a fast machine the
        # remaining epochs can finish before Ray declares the node dead), then let it vanish with its node.
        pid = rows[0]["pid"]
        lost = _node_of(pid, workers)
        os.kill(pid, signal.SIGSTOP)
        c.remove_node(lost, allow_graceful=False)
        os.kill(pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    rows = _results(trial_dirs[0])
    restarts = [r for r in rows if r["iterations_since_restore"] == 1 and r["training_iteration"] > 1]
    assert len(restarts) == 1, [(r["training_iteration"], r["iterations_since_restore"], r["pid"]) for r in rows]
    # A new worker process, necessarily on the surviving worker node (the head has no CPUs) ...
    assert restarts[0]["pid"] != rows[0]["pid"]
    assert rows[-1]["training_iteration"] == epochs
    # ... that went on from a checkpoint, not from scratch, and skipped nothing: the epoch after the last
    # reported one, or that epoch again when the node died between its report and its checkpoint's commit.
    before = rows[rows.index(restarts[0]) - 1]
    assert 2 <= restarts[0]["training_iteration"] <= before["training_iteration"] + 1
    print(
        f"\nnode removal: worker removed after epoch {before['training_iteration']} was reported; the trial "
        f"restarted at epoch {restarts[0]['training_iteration']} (pid {before['pid']} -> {restarts[0]['pid']}), "
        f"finished {epochs}/{epochs} epochs"
    )
    client, parents, children = mlflow_children(study_dir, "t_node")
    assert len(children) == 1 and children[0].info.status == "FINISHED" and parents[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(children[0].info.run_id, "test/recall_at_1")]
    assert steps == list(range(1, epochs + 1))
    assert [t.state.name for t in optuna_trials(study_dir, "t_node")] == ["COMPLETE"]

"""Hardening: no secret on disk, artifacts with the study wherever the command runs, one driver per study, no
silent wait for resources, failures named in the summary."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from harness.driver import mlflow_children, tiny_spec
from study.commands.run import main
from study.runtime.lock import study_lock
from study.runtime.watchdog import PendingTimeout, check_cluster_resources
from study.tracking.credentials import MASK, RedactedRDBStorage, connection_url, redact, redacted_spec, remember
from trainables.schema.errors import SpecError, StudyStalledError
from trainables.schema.spec import StudySpec

LITERAL = "LITSENTINEL7f3a"  # a password written in the spec
FROM_ENV = "ENVSENTINEL91c2"  # a password the URL names as ${DMLS_TEST_SECRET}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", f"postgresql://u:{MASK}@h:5432/db"),
        ("postgresql://u:${PW}@h/db", "postgresql://u:${PW}@h/db"),
        ("mysql://u@h/db?sslmode=require&password=x1", f"mysql://u@h/db?sslmode=require&password={MASK}"),
        ("sqlite:////abs/o.db?Token=t&timeout=3", f"sqlite:////abs/o.db?Token={MASK}&timeout=3"),
        ("sqlite:////abs/o.db", "sqlite:////abs/o.db"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ],
)
def test_redact_masks_literal_passwords_only(url, expected):
    assert redact(url) == expected


def test_connection_url_resolves_the_real_url_and_env_vars(monkeypatch):
    monkeypatch.setenv("DMLS_TEST_SECRET", FROM_ENV)
    key = remember(f"postgresql://u:{LITERAL}@h/db")
    assert LITERAL not in key and connection_url(key) == f"postgresql://u:{LITERAL}@h/db"
    assert connection_url("postgresql://u:${DMLS_TEST_SECRET}@h/db") == f"postgresql://u:{FROM_ENV}@h/db"
    monkeypatch.delenv("DMLS_TEST_SECRET")
    with pytest.raises(SpecError, match=r"^tracking.optuna_uri: environment variable DMLS_TEST_SECRET is not set"):
        connection_url("postgresql://u:${DMLS_TEST_SECRET}@h/db", "tracking.optuna_uri")


def test_pickled_optuna_storage_keeps_no_password(tmp_path):
    import pickle

    storage = RedactedRDBStorage(f"sqlite:///{tmp_path}/o.db?password={LITERAL}")
    blob = pickle.dumps(storage)
    assert LITERAL.encode() not in blob
    restored = pickle.loads(blob)  # reconnects through the real URL this process remembers
    assert restored.get_all_studies() == []


def test_spec_record_is_redacted():
    spec = StudySpec.model_validate(
        {"name": "s", "family": "ms", "tracking": {"optuna_uri": f"postgresql://u:{LITERAL}@h/db"}}
    )
    assert redacted_spec(spec)["tracking"]["optuna_uri"] == f"postgresql://u:{MASK}@h/db"


def _files_containing(roots: list[Path], needles: list[str]) -> list[str]:
    hits = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                hits += [f"{path}: {n}" for n in needles if n.encode() in data]
    return hits


@pytest.mark.e2e
def test_no_secret_on_disk_artifacts_with_the_study_and_one_driver(tmp_path):
    """Two drivers started together on one study whose tracking URLs carry secrets, from an unrelated cwd: one
    runs, the other exits 2 naming the lock; no file anywhere (study, stores, Ray's session) holds a secret, the
    cwd stays empty and the artifacts live under the study."""
    spec = tiny_spec("t_secret", epochs=1)
    spec["final"] = {"seeds": 1}
    inputs, cwd, stores = tmp_path / "inputs", tmp_path / "cwd", tmp_path / "stores"
    for d in (inputs, cwd, stores):
        d.mkdir()
    (inputs / "spec.yaml").write_text(yaml.safe_dump(spec))
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1", "DMLS_TEST_SECRET": FROM_ENV}
    env.pop("RAY_ADDRESS", None)
    args = [
        sys.executable,
        "-m",
        "study.run",
        str(inputs / "spec.yaml"),
        "--set",
        f"storage={tmp_path / 'runs'}",
        "--set",
        f"tracking.uri=sqlite:///{stores}/mlflow.db?password={LITERAL}",
        "--set",
        f"tracking.optuna_uri=sqlite:///{stores}/optuna.db?password=${{DMLS_TEST_SECRET}}",
    ]
    try:
        procs = [subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
        procs.append(
            subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
        outs = [p.communicate(timeout=600) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 2], outs
        loser = outs[[p.returncode for p in procs].index(2)]
        assert loser[1].count("\n") == 1 and "lock" in loser[1] and "Traceback" not in loser[1], loser[1]
        hits = _files_containing([tmp_path / "runs", stores, cwd, ray_tmp], [LITERAL, FROM_ENV])
        hits += [f"console: {n}" for out in outs for n in (LITERAL, FROM_ENV) if n in out[0] + out[1]]
        assert hits == []
        assert list(cwd.iterdir()) == []  # no ./mlruns, nothing else
        study = tmp_path / "runs" / "t_secret"
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{stores}/mlflow.db")
        experiment = client.get_experiment_by_name("t_secret")
        assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
        runs = client.search_runs([experiment.experiment_id])
        assert runs and all(r.info.artifact_uri.startswith((study / "mlflow-artifacts").as_uri()) for r in runs)
        winner = outs[[p.returncode for p in procs].index(0)]
        assert any((study / "mlflow-artifacts").rglob("*.html")), winner[1][-2000:]  # the dashboard, on the parent run
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_gpu_the_machine_lacks_is_refused_before_ray(tmp_path, write_spec, spec_dict, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import torch

    if torch.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU")
    code = main([str(write_spec(spec_dict)), "--set", "resources.gpu=1", "--set", f"storage={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: resources.gpu: a trial needs 1 GPU(s)")
    assert not (tmp_path / "runs").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_unwritable_storage_is_one_line(tmp_path, write_spec, spec_dict, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")  # a storage path under a regular file cannot be created, even by root
    code = main([str(write_spec(spec_dict)), "--set", f"storage={tmp_path / 'afile' / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: storage: cannot write to"), err
    assert (tmp_path / "afile").read_text() == ""


def test_lock_is_exclusive_and_leaves_no_trace(tmp_path):
    from trainables.schema.errors import StudyLockedError

    root = str(tmp_path / "runs" / "s")
    with study_lock(root):
        assert (tmp_path / "runs" / "s.lock").read_text() == str(os.getpid())
        with pytest.raises(StudyLockedError, match=r"study 's' is being run by another driver"), study_lock(root):
            pass
    assert not (tmp_path / "runs").exists()  # no study was written, so neither lock nor storage stays behind
    with study_lock(root):  # released: the next driver gets it
        pass


def test_lock_holder_tells_a_live_driver_from_a_killed_one(tmp_path):
    """--status reads the lock: held by a live process (its pid), free once that process is SIGKILLed."""
    from study.runtime.lock import lock_holder

    root = str(tmp_path / "runs" / "s")
    assert lock_holder(root) == "" and not (tmp_path / "runs").exists()  # never started: nothing created
    assert lock_holder("s3://bucket/runs/s") is None  # object storage has no lock: unknown
    code = (
        "import sys, time; from study.runtime.lock import study_lock\n"
        f"with study_lock({root!r}):\n    (open({root!r}, 'w').close(), print('locked', flush=True), time.sleep(60))"
    )
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline() == "locked\n"
        assert lock_holder(root) == str(driver.pid)
        with study_lock(str(tmp_path / "runs" / "other")):  # another study's lock is another file
            assert lock_holder(root) == str(driver.pid)
    finally:
        driver.kill()
        driver.wait()
    assert lock_holder(root) == ""  # the kernel released the killed driver's lock


def _nodes(*cpus: float, gpus: float = 0.0) -> list[dict]:
    return [{"Alive": True, "Resources": {"CPU": c, "GPU": gpus}} for c in cpus] + [
        {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}  # a dead node counts for nothing
    ]


def test_cluster_resource_check():
    spec = StudySpec.model_validate({"name": "s", "family": "ms", "resources": {"cpu": 4, "gpu": 1}})
    assert check_cluster_resources(spec, _nodes(8, gpus=1), local=True) is None
    with pytest.raises(SpecError, match=r"^resources.gpu: a trial needs 1 GPU\(s\) but no Ray node has more than 0"):
        check_cluster_resources(spec, _nodes(8, 8), local=True)
    # on a cluster an autoscaler may add the node: a reason to warn, not an error
    assert "4 CPU(s)" in check_cluster_resources(spec, _nodes(2, gpus=1), local=False)


def test_pending_timeout_fails_only_when_nothing_runs(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    watch = PendingTimeout(10)

    def step(*statuses: str) -> None:
        watch.on_step_end(0, [SimpleNamespace(status=s) for s in statuses])

    step("PENDING", "RUNNING")
    clock[0] = 100.0
    step("PENDING", "RUNNING")  # waiting behind a running trial is progress
    step("PENDING", "TERMINATED")
    clock[0] = 105.0
    step("PENDING")  # stalled for 5 s: still under the timeout
    clock[0] = 111.0
    with pytest.raises(StudyStalledError, match="no trial could start for 10 s"):
        step("PENDING")
    PendingTimeout(0).on_step_end(0, [SimpleNamespace(status="PENDING")])  # 0 waits forever


@pytest.mark.usefixtures("on_warm_head")
@pytest.mark.e2e
def test_failed_trials_are_listed_with_their_reason(spec_dict, write_spec, run_cli, tmp_path, capsys):
    """A study whose every trial fails exits 1 and names each failure and its reason, on the console and in
    ``--status`` (a study with some failed trials lists them too and ends 0: test_failures.py)."""
    from study.commands import status

    spec_dict["name"] = "t_reason"
    spec_dict["train"].update(epochs=1, batches_per_epoch=3, recall_at=[1])
    spec_dict["train"]["optimizer"] = {"name": "sgd", "lr": 1e38}  # the loss is NaN at once
    spec_dict["search"]["num_trials"] = 1
    del spec_dict["search"]["space"]["train.optimizer.lr"]
    proc = run_cli(str(write_spec(spec_dict)), "--no-dashboard")
    assert proc.returncode == 1
    assert "failed: trial " in proc.stdout and "NonFiniteLossError" in proc.stdout, proc.stdout[-2000:]
    capsys.readouterr()
    assert status.main([str(tmp_path / "runs" / "t_reason")]) == 0
    shown = capsys.readouterr()
    assert "failed (search): trial" in shown.out, shown.out + shown.err
    _, _, children = mlflow_children(tmp_path / "runs" / "t_reason", "t_reason")
    assert [r.info.status for r in children] == ["FAILED"]


@pytest.mark.e2e
def test_tracking_server_restart_mid_study_loses_nothing(tmp_path, monkeypatch):
    """A study tracked through a local MLflow server (runs and artifacts through its proxy, no local ``mlflow.db``)
    whose server is killed after the first epoch is logged and restarted 5 s later on the same port: the study goes
    on (MLflow's client retries), every trial has every epoch's metrics, no run stays RUNNING, and the noisy-label
    record reached the server's artifacts (tests/PROMISES.md F9, D7, DA3)."""
    import numpy as np
    from mlflow import MlflowClient

    from study.tracking.server import start_server

    epochs, num_trials = 2, 2
    spec = tiny_spec("t_restart", epochs=epochs, num_trials=num_trials)
    spec["dataset"]["noise"] = {"kind": "uniform", "ratio": 0.2}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    # Both servers without MLflow's job runner (four huey consumers that serve nothing here): each is up ~5 s sooner.
    monkeypatch.setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    server = start_server(tmp_path / "mlflow")
    assert server.uri.startswith("http://127.0.0.1:")
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard", "--set", f"tracking.uri={server.uri}"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = MlflowClient(server.uri)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            runs = client.search_runs(
                [e.experiment_id for e in client.search_experiments()], filter_string="tags.`dmlstudy.role` = 'trial'"
            )
            if any(r.data.metrics for r in runs):
                break
            time.sleep(0.2)
        # The first trial's second epoch and the whole second trial (its worker's start included) are still to come.
        assert proc.poll() is None, "the study ended before the server could be killed"
        port = server.port
        server.stop()
        time.sleep(5)
        server = start_server(tmp_path / "mlflow", port=port)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        client = MlflowClient(server.uri)
        experiment = client.get_experiment_by_name("t_restart")
        runs = client.search_runs([experiment.experiment_id])
        trials = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
        assert len(trials) == num_trials and all(r.info.status == "FINISHED" for r in runs)
        assert len(runs) == num_trials + 1  # and one parent
        for run in trials:
            steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1"))
            assert steps == list(range(1, epochs + 1)), (run.info.run_id, steps)
            assert float(run.data.params["dataset.noise.ratio"]) == 0.2
            # Artifacts went through the server's proxy into its artifacts directory.
            local = client.download_artifacts(run.info.run_id, "train_labels.npz", str(tmp_path / run.info.run_id))
            assert np.load(local)["noisy"].mean() == pytest.approx(0.2, abs=0.03)
        assert len(list((tmp_path / "mlflow" / "artifacts").rglob("train_labels.npz"))) == num_trials
        # Nothing was written to a local sqlite store in the study directory.
        assert (tmp_path / "runs" / "t_restart").is_dir() and not (
            tmp_path / "runs" / "t_restart" / "mlflow.db"
        ).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_seeded_mlflow_store_is_opt_in_and_equivalent(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from study.tracking.store import TrackingStore

    monkeypatch.delenv("DMLSTUDY_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    TrackingStore(f"sqlite:///{tmp_path}/plain.db", "e", (tmp_path / "a").as_uri())
    assert not (tmp_path / "home").exists()  # nothing written outside the store without the opt-in
    monkeypatch.setenv("DMLSTUDY_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("s1", "s2"):  # the second store is a copy of the template the first built
        store = TrackingStore(f"sqlite:///{tmp_path}/{name}.db?password={LITERAL}", "e", (tmp_path / name).as_uri())
        client = MlflowClient(f"sqlite:///{tmp_path}/{name}.db")
        assert client.get_experiment(store.experiment_id).artifact_location == (tmp_path / name).as_uri()
        assert client.get_experiment("0").name == "Default"
    assert any((tmp_path / "cache").iterdir()) and sorted(p.name for p in tmp_path.glob("s*.db")) == ["s1.db", "s2.db"]

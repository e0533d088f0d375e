"""The cluster deployment end to end (:class:`harness.deployment.Deployment`, as docs/cluster.md "Deploy" describes
it): PostgreSQL for Optuna and for ``mlflow server``, moto's S3 emulator for ``storage: s3://…`` and MLflow's
artifacts, a ``ray start`` head and two workers with a token, all on 127.0.0.1 in a private network namespace. One
study with a final stage; during it PostgreSQL is restarted, the MLflow server is restarted and a worker node is
SIGKILLed. Without ``--resume`` the study ends 0, Optuna holds every trial COMPLETE in PostgreSQL, every MLflow run is
FINISHED with each epoch once, ``--status``, the dashboard and ``dashboards.compare.cli`` work against the servers, and the
database password is in no file the study, Ray or the servers wrote. Skips, saying why, only where PostgreSQL, moto or a
network namespace cannot be had."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.deployment import BUCKET, Deployment, deployment_spec, deployment_unavailable_reason

pytestmark = pytest.mark.e2e
_reason = deployment_unavailable_reason()

EPOCHS, TRIALS, SEEDS = 3, 2, 2


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_the_deployment_survives_its_restarts(tmp_path):
    started = time.monotonic()
    with Deployment(tmp_path / "services") as d:
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(deployment_spec(d, "t_deploy", TRIALS, SEEDS, EPOCHS)))
        env = d.driver_env()
        args = [sys.executable, "-m", "study.run", "spec.yaml", "--address", d.address, "--max-failures", "2"]
        log = (tmp_path / "driver.err").open("w")
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        faults: list[str] = []
        plan = [  # (epochs logged before the fault, fault)
            (1, lambda: d.restart_postgres(down_s=5.0) or "postgres restarted (5 s down)"),
            (3, lambda: d.restart_mlflow(down_s=3.0) or "mlflow server restarted (3 s down)"),
            (5, lambda: (killed := d.kill_worker()) and f"worker node killed ({len(killed)} processes)"),
        ]
        try:
            while plan and proc.poll() is None:
                at, fault = plan[0]
                if d.logged_epochs() >= at:
                    done = fault()
                    if done:
                        faults.append(f"{done} at {time.monotonic() - started:.0f} s")
                        plan.pop(0)
                assert time.monotonic() - started < 900, "the study did not get far enough"
                time.sleep(0.3)
            out, _ = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
        err = (tmp_path / "driver.err").read_text()
        print("\n".join(faults))
        print(err[-4000:])
        assert proc.returncode == 0, err[-4000:]
        assert len(faults) == 3, faults
        # Each store outage is two lines, no traceback (the killed node's trial is one Ray traceback: Ray logs it).
        assert err.count("is unreachable") == 2 and err.count("is back after") == 2, err[-4000:]
        assert "StorageInternalError" not in err and "MlflowException" not in err

        # Optuna in PostgreSQL: every search trial COMPLETE, with each epoch once.
        states = d.query(
            "SELECT t.state, count(*) FROM trials t JOIN studies s USING (study_id) "
            "WHERE s.study_name = 't_deploy' GROUP BY t.state",
            "optuna",
        )
        assert dict(states) == {"COMPLETE": TRIALS}, states

        # MLflow (read from its database): every run FINISHED, each epoch logged once.
        from mlflow import MlflowClient

        client = MlflowClient(d.socket_url("mlflow"))
        experiment = client.get_experiment_by_name("t_deploy")
        runs = client.search_runs([experiment.experiment_id])
        trials = [r for r in runs if r.data.tags.get("dmlstudy.role") == "trial"]
        assert len(trials) == TRIALS + SEEDS, [r.data.tags for r in runs]
        assert all(r.info.status == "FINISHED" for r in runs), [(r.info.run_id, r.info.status) for r in runs]
        for run in trials:
            metric = "val/recall_at_1" if run.data.tags.get("stage") == "search" else "test/recall_at_1"
            steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
            assert sorted(steps) == list(range(1, EPOCHS + 1)), (run.data.tags, steps)

        # The study's files went to the bucket, and the status, the dashboard and compare read the servers.
        keys = d.s3.keys(BUCKET)
        assert "studies/t_deploy/spec.yaml" in keys and any(k.startswith("mlflow/") for k in keys), keys[:20]
        status = subprocess.run(
            [sys.executable, "-m", "study.run", "spec.yaml", "--status"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert status.returncode == 0 and f"{TRIALS}" in status.stdout, status.stderr[-2000:]
        compare = subprocess.run(
            [sys.executable, "-m", "dashboards.compare", "spec.yaml", "--reference", "ms"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert compare.returncode == 0 and "ms" in compare.stdout, compare.stderr[-2000:]
        assert "open " in out and "dashboard" in out, out[-2000:]  # the page was built from the server

        # The password is in no file the study, Ray or the servers wrote, nor on the console.
        secret = d.pg.password.encode()
        assert secret not in out.encode() + err.encode() + status.stdout.encode() + compare.stdout.encode()
        for key in keys:
            assert secret not in d.s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read(), key
        for root in (Path(d.ray_tmp), tmp_path, d.pg.root):
            for path in root.rglob("*"):
                if path.is_file():
                    assert secret not in path.read_bytes(), path
    print(f"deployment test: {time.monotonic() - started:.0f} s")

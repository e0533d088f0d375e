"""A table on object storage (issue 40): ``storage: s3://…`` against moto's S3 *emulator* (not AWS), with Optuna and
MLflow on a PostgreSQL started by the test (Debian's package): the run writes its report into the bucket, ``--status``
and ``dashboards.compare`` read the table there, a ``--resume`` of the finished table writes the report again, and an
unreachable endpoint is the study's pre-flight line and exit 2 with nothing started. Read back from the bucket,
Optuna and MLflow, not from the driver's output alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
import yaml

from harness.driver import REPO, tiny_table
from harness.postgres import PASSWORD_ENV, postgres_server, postgres_unavailable_reason
from harness.s3 import s3_server, s3_unavailable_reason
from study.tracking.server import free_port
from trainables.schema import record as R

_reason = postgres_unavailable_reason() or s3_unavailable_reason()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(_reason is not None, reason=_reason or "")]

BUCKET = "tables"
NAME = "t_s3_table"


def _table(pg) -> dict:
    """Two arms × one condition, one trial per cell (2 at a time), two final seeds: digits, one epoch of 4 batches."""
    table = tiny_table(NAME, 1, 4, 1, 2, storage=f"s3://{BUCKET}/runs")
    table["search"] = {**table["search"], "max_concurrent": 2}
    table["tracking"] = {"uri": pg.url("mlflow"), "optuna_uri": pg.url("optuna")}
    return table


def _run(tmp_path: Path, env: dict[str, str], *args: str, module: str = "study.run") -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS``; ``ray_started`` on the result: whether Ray wrote into its private temp dir."""
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1", **env}
    full_env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=900
    )
    assert os.environ[PASSWORD_ENV] not in done.stdout + done.stderr
    done.ray_started = any(Path(ray_tmp).iterdir())  # type: ignore[attr-defined]
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return done


def test_a_table_on_s3_end_to_end(tmp_path, monkeypatch):
    with postgres_server() as pg, s3_server(tmp_path) as s3:
        for key, value in s3.env().items():  # this process's MLflow client reads the artifacts in the bucket
            monkeypatch.setenv(key, value)
        pg.create_database("optuna")
        pg.create_database("mlflow")
        s3.create_bucket(BUCKET)
        spec = tmp_path / "table.yaml"
        spec.write_text(yaml.safe_dump(_table(pg), sort_keys=False))
        env = {**s3.env(), PASSWORD_ENV: pg.password}

        # An unreachable endpoint: the study's pre-flight line, exit 2, nothing started or written.
        down = _run(tmp_path, {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}, str(spec))
        assert down.returncode == 2, down.stderr[-3000:]
        assert len(down.stderr.splitlines()) == 1, down.stderr[-3000:]
        assert down.stderr.startswith("error: storage: cannot reach the object store at http://127.0.0.1:")
        assert s3.keys(BUCKET) == [] and not down.ray_started

        proc = _run(tmp_path, env, str(spec), "--no-dashboard")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        root = f"s3://{BUCKET}/runs/{NAME}"
        assert f"Written to {root}/{R.TABLE_REPORT_FILE}" in proc.stdout
        keys = s3.keys(BUCKET)
        report_key = f"runs/{NAME}/{R.TABLE_REPORT_FILE}"
        assert report_key in keys and f"runs/{NAME}/table.yaml" in keys and f"runs/{NAME}/{R.SPEC_FILE}" in keys
        report = s3.client().get_object(Bucket=BUCKET, Key=report_key)["Body"].read().decode()
        assert report in proc.stdout and "reference family **ms**" in report and "| spl | Δ " in report

        # Optuna (PostgreSQL): one study per cell with its one COMPLETE trial.
        storage = optuna.storages.RDBStorage(pg.url("optuna").replace("${" + PASSWORD_ENV + "}", pg.password))
        studies = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
        assert studies == [f"{NAME}.ms.p0.2", f"{NAME}.spl.p0.2"]
        for name in studies:
            assert [t.state.name for t in optuna.load_study(study_name=name, storage=storage).trials] == ["COMPLETE"]
        # MLflow (PostgreSQL, artifacts in the bucket): the report is the parent run's artifact.
        from mlflow import MlflowClient

        client = MlflowClient(pg.url("mlflow").replace("${" + PASSWORD_ENV + "}", pg.password))
        experiment = client.get_experiment_by_name(NAME)
        runs = client.search_runs([experiment.experiment_id])
        parent = next(r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_STUDY)
        assert R.TABLE_REPORT_FILE in {a.path for a in client.list_artifacts(parent.info.run_id)}
        assert any(k.startswith(f"runs/{NAME}/{R.MLFLOW_ARTIFACTS_DIR}/") and k.endswith("/table.md") for k in keys)
        finals = [r for r in runs if r.data.tags.get(R.STAGE) == R.STAGE_FINAL and r.info.status == "FINISHED"]
        assert len(finals) == 4

        # --status reads the table in the bucket.
        status = _run(tmp_path, env, str(spec), "--status")
        assert status.returncode == 0, status.stderr[-3000:]
        rows = {ln.split()[0]: ln.split() for ln in status.stdout.splitlines() if ln.startswith(("ms.", "spl."))}
        assert set(rows) == {"ms.p0.2", "spl.p0.2"}
        for row in rows.values():
            assert row[2:6] == ["1/1", "0", "0", "0"] and "2/2" in row  # finished, pruned, failed, running; seeds

        # dashboards.compare reads the study directory in the bucket.
        compare = _run(tmp_path, env, root, "--reference", "ms", module="dashboards.compare")
        assert compare.returncode == 0, compare.stderr[-3000:]
        assert "| spl | Δ " in compare.stdout

        # --resume of the finished table: nothing is trained again, the report is written again.
        client_s3 = s3.client()
        client_s3.delete_object(Bucket=BUCKET, Key=report_key)
        resumed = _run(tmp_path, env, str(spec), "--resume", "--no-dashboard")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert report_key in s3.keys(BUCKET)
        runs_after = client.search_runs([experiment.experiment_id])
        assert len(runs_after) == len(runs)  # no trial ran twice

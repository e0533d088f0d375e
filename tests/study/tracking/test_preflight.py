"""Pre-flight of the stores on servers (``study/tracking/preflight.py``), through the CLI against real servers: a PostgreSQL
started by the test (Debian's package) and moto's server mode, an S3 *emulator*. Each broken store is one line, exit
2, naming the spec key, the redacted URL's host:port and the fix; Ray is never started and nothing is written (no
study directory, no lock, no object in the bucket). The password is never printed.

Each test runs its own drivers (a test that needs several runs them at once): ``--dist loadgroup`` may deal this
module's tests to both workers of ``pytest -n 2`` (``xdist_group`` is ignored under pytest 9.2 with xdist 3.8), and a
module fixture that started every test's driver would then start them all twice."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from harness.driver import REPO, tiny_spec
from harness.postgres import PASSWORD_ENV, postgres_server, postgres_unavailable_reason
from harness.s3 import s3_server, s3_unavailable_reason
from study.tracking.server import free_port

_reason = postgres_unavailable_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")


@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        server.create_database("optuna")
        yield server


def _run(directory: Path, tracking: dict, env: dict[str, str] | None = None, storage: str | None = None) -> str:
    """The driver's one line on a spec with ``tracking`` and ``storage`` (in ``directory``, its own), after checking
    that it refused: exit 2, one line, no study directory, Ray not started, the password not printed."""
    directory.mkdir()
    spec = tiny_spec("t_preflight", epochs=1)
    spec["tracking"] = tracking
    spec["storage"] = storage or str(directory / "runs")
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    ray_tmp = tempfile.mkdtemp(prefix="rp", dir="/tmp")
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": ray_tmp, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard"],
        cwd=directory,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,  # a driver may share the CPUs with the test's other drivers, and on CI with another test
    )
    print(done.stderr.strip())
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr[-3000:]  # one line
    assert not (directory / "runs").exists()  # no study directory, no lock, no mlflow.db
    assert not any(Path(ray_tmp).iterdir()), "Ray was started"
    assert os.environ[PASSWORD_ENV] not in done.stderr + done.stdout
    return done.stderr.strip()


def test_driver_missing(pg, tmp_path):
    fake = tmp_path / "nodriver"
    (fake / "psycopg").mkdir(parents=True)
    (fake / "psycopg" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    line = _run(tmp_path / "run", {"optuna_uri": pg.url("optuna")}, {"PYTHONPATH": f"{fake}:{REPO}"})
    assert line.startswith("error: tracking.optuna_uri: postgresql://postgres:***@127.0.0.1:")
    assert 'psycopg, which is not installed: pip install -e ".[postgres]"' in line


def test_server_unreachable(pg, tmp_path):
    port = free_port()
    url = pg.url("optuna").replace(f":{pg.port}/", f":{port}/")
    line = _run(tmp_path / "run", {"optuna_uri": url})
    assert line.startswith(f"error: tracking.optuna_uri: cannot reach the database server at 127.0.0.1:{port}")
    assert "start it" in line


def test_wrong_password(pg, tmp_path):
    line = _run(tmp_path / "run", {"optuna_uri": pg.url("optuna", password="wrong-sentinel-pw")})
    assert "refused the login of user 'postgres'" in line and f"127.0.0.1:{pg.port}" in line
    assert "wrong-sentinel-pw" not in line and "postgres:***@" in line


def test_database_missing(pg, tmp_path):
    line = _run(tmp_path / "run", {"optuna_uri": pg.url("nosuchdb")})
    assert line.startswith("error: tracking.optuna_uri: database 'nosuchdb' does not exist on the server at ")
    assert "create it (createdb" in line


def test_tracking_server_unreachable(pg, tmp_path):
    port = free_port()
    line = _run(tmp_path / "run", {"optuna_uri": pg.url("optuna"), "uri": f"http://127.0.0.1:{port}"})
    assert line.startswith(f"error: tracking.uri: cannot reach the MLflow tracking server at 127.0.0.1:{port}")


@pytest.mark.skipif(s3_unavailable_reason() is not None, reason=s3_unavailable_reason() or "")
def test_bucket_missing_or_unreachable(pg, tmp_path):
    with s3_server(tmp_path) as s3:
        s3.create_bucket("studies-present")
        tracking = {"optuna_uri": pg.url("optuna"), "uri": f"http://127.0.0.1:{free_port()}"}
        elsewhere = {**s3.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
        with ThreadPoolExecutor(3) as pool:  # three drivers that share nothing: at once
            absent = pool.submit(_run, tmp_path / "absent", tracking, s3.env(), "s3://studies-absent/runs")
            unreachable = pool.submit(_run, tmp_path / "unreachable", tracking, elsewhere, "s3://studies-present/runs")
            present = pool.submit(_run, tmp_path / "present", tracking, s3.env(), "s3://studies-present/runs")
        assert absent.result() == (
            f"error: storage: the bucket 'studies-absent' of s3://studies-absent/runs/t_preflight does not exist at "
            f"{s3.endpoint}: create it (aws s3 mb s3://studies-absent), or fix storage"
        )
        assert "error: storage: cannot reach the object store at http://127.0.0.1:" in unreachable.result()
        # the bucket is reachable and writable: the probe leaves nothing, and the next store (MLflow) is refused
        assert present.result().startswith("error: tracking.uri: cannot reach the MLflow tracking server")
        assert s3.keys("studies-present") == []


@pytest.mark.skipif(s3_unavailable_reason() is not None, reason=s3_unavailable_reason() or "")
def test_bucket_not_writable(pg, tmp_path):
    with s3_server(tmp_path, auth_after=4) as s3:  # the bucket and a read-only IAM user, then every request is checked
        s3.create_bucket("studies-readonly")
        reader = s3.read_only_user("studies-readonly")
        tracking = {"optuna_uri": pg.url("optuna"), "uri": f"http://127.0.0.1:{free_port()}"}
        line = _run(tmp_path / "run", tracking, reader, storage="s3://studies-readonly/runs")
        assert line == (
            f"error: storage: s3://studies-readonly/runs/t_preflight cannot be written at {s3.endpoint} (access "
            "denied): grant these credentials write access to the bucket, or fix storage / the AWS_* credentials"
        )


def test_drivers_creating_one_fresh_optuna_schema_at_once_all_succeed(pg):
    """Optuna creates its tables unlocked: 6 storages built at one instant on a fresh database failed 5 of 6 with
    ``duplicate key … pg_type_typname_nsp_index`` (each of 5 rounds). Under the schema lock (the pre-flight's and the
    driver's storage alike) every one succeeds, and the database holds one schema."""
    import threading

    from optuna.storages import RDBStorage

    from study.tracking.credentials import RedactedRDBStorage
    from study.tracking.schema_lock import creating_optuna_schema

    def locked_preflight(url: str) -> None:
        with creating_optuna_schema(url):
            RDBStorage(url).engine.dispose()

    for round_ in range(3):
        database = f"schema_race_{round_}"
        pg.create_database(database)
        url = pg.url(database, password=pg.password)
        barrier, errors = threading.Barrier(6), []

        def build(index: int, url: str = url, barrier: threading.Barrier = barrier, errors: list = errors) -> None:
            barrier.wait()
            try:
                (locked_preflight if index % 2 else lambda u: RedactedRDBStorage(u).engine.dispose())(url)
            except Exception as e:  # noqa: BLE001 - collected and shown
                errors.append(f"{type(e).__name__}: {str(e)[:120]}")

        threads = [threading.Thread(target=build, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert errors == [], errors
        assert RDBStorage(url).get_all_studies() == []

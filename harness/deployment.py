"""The cluster deployment of docs/notebook/cluster.md on one machine, every service on 127.0.0.1 inside one private network
namespace (:class:`harness.netns.NetNamespace`; Ray rewrites 127.0.0.1 to the machine's address otherwise):

- PostgreSQL from Debian's package (:mod:`harness.postgres`): database ``optuna`` for the study's Optuna storage,
  ``mlflow`` for the tracking server's backend store; the password in ``$PGTEST_PASSWORD`` only;
- ``mlflow server`` on the ``mlflow`` database, serving artifacts from ``s3://dmlstudy/mlflow``;
- moto's server mode, an S3 *emulator*, for ``storage: s3://dmlstudy/studies`` and MLflow's artifacts;
- ``ray start``: a head with no CPUs and ``workers`` one-CPU workers, token authentication on every node and driver.

The calling thread enters the namespace for the block (``setns``), so the test's own clients and every process it
starts (the servers, the nodes, the driver) see the same loopback; the test reads PostgreSQL through its unix socket.
Faults, graceful and crashed: :meth:`restart_postgres` (``pg_ctl -m fast``), :meth:`crash_postgres` (the postmaster
SIGKILLed: crash recovery on restart), :meth:`restart_mlflow` (SIGTERM), :meth:`crash_mlflow` (the server SIGKILLed,
mid-write if a write is in flight), :meth:`kill_worker` (a node SIGKILLed with everything on it). :meth:`tally` reads
both stores back and counts what is lost and what is duplicated, separately. Everything started here is ended here,
by PID.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.driver import REPO
from harness.netns import NetNamespace, netns_unavailable_reason
from harness.postgres import PASSWORD_ENV, Postgres, postgres_server, postgres_unavailable_reason
from harness.ray_nodes import descendants, is_trial, kill_node, start_node
from harness.s3 import S3, s3_server, s3_unavailable_reason
from study.tracking.server import free_port
from trainables.schema import record as R

__all__ = ["Deployment", "deployment_unavailable_reason", "deployment_spec", "deployment_table_spec", "BUCKET"]

BUCKET = "dmlstudy"
_CLONE_NEWNET = 0x40000000
MLFLOW = str(Path(sys.executable).with_name("mlflow"))


def deployment_spec(d: Deployment, name: str, trials: int, seeds: int, epochs: int) -> dict:
    """A digits study with honest selection and a final stage (:func:`harness.driver.honest_spec`), its storage and
    stores on ``d``."""
    from harness.driver import honest_spec

    spec = honest_spec(name)
    spec["train"] = {**spec["train"], "epochs": epochs, "batches_per_epoch": 6}
    spec["search"] = {**spec["search"], "num_trials": trials}
    spec["final"] = {"seeds": seeds}
    spec["storage"] = d.storage
    spec["tracking"] = {"uri": d.tracking_uri, "optuna_uri": d.optuna_url}
    return spec


def deployment_table_spec(d: Deployment, name: str, trials: int, seeds: int, epochs: int) -> dict:
    """A digits table on ``d``: arms ms and bspml × per-class noise 0 and 20 %, ``trials`` per cell, honest selection
    (2 class-disjoint folds), ``seeds`` final seeds per cell (4 cells)."""
    study = deployment_spec(d, name, trials, seeds, epochs)
    table = {k: v for k, v in study.items() if k not in ("family", "search")}
    table["search"] = {k: v for k, v in study["search"].items() if k != "space"}
    table["reference"] = "ms"
    table["arms"] = {
        "ms": {"family": "ms", "space": {"ms_alpha": {"type": "float", "low": 1.0, "high": 3.0}}},
        "bspml": {
            "family": "bspml",
            "params": {"lambda_scale": "relative"},
            "space": {"mu": {"type": "float", "low": 0.0, "high": 6.0}},
        },
    }
    table["cells"] = {"dataset.noise.ratio": [0.0, 0.2]}
    return table


def deployment_unavailable_reason() -> str | None:
    return postgres_unavailable_reason() or s3_unavailable_reason() or netns_unavailable_reason()


@contextlib.contextmanager
def _inside(ns: NetNamespace) -> Iterator[None]:
    """The calling thread in ``ns``'s network namespace for the block (the processes it starts inherit it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)  # this thread's namespace, to come back to
    target = os.open(f"/proc/{ns.pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the test's network namespace failed")
        try:
            yield
        finally:
            libc.setns(own, _CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)


class Deployment:
    """Enter to start everything (see the module docstring); the attributes name what a spec and a driver need."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.workers_wanted = workers
        self.token = secrets.token_hex(16)
        self.ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")  # short: Ray's socket paths stay under 108 bytes
        self._stack = contextlib.ExitStack()
        self.pg: Postgres
        self.s3: S3
        self.mlflow: subprocess.Popen | None = None
        self.mlflow_port = 0
        self.head: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address = ""

    # -- what a study needs -------------------------------------------------------------------------------------
    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def optuna_url(self) -> str:
        return self.pg.url("optuna")  # names ${PGTEST_PASSWORD}: the driver resolves it when it connects

    @property
    def storage(self) -> str:
        return f"s3://{BUCKET}/studies"

    def driver_env(self) -> dict[str, str]:
        """The driver's environment: the cluster's token, the S3 endpoint and keys, the database password."""
        return {**self._cluster_env(), PASSWORD_ENV: self.pg.password}

    def _cluster_env(self) -> dict[str, str]:
        """The driver's environment but the database password (the nodes start before PostgreSQL)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        return {
            **base,
            **self.s3.env(),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }

    def node_env(self) -> dict[str, str]:
        """A Ray node's environment: token and S3 (trials write their checkpoints there), no database password."""
        env = {k: v for k, v in self._cluster_env().items() if k != PASSWORD_ENV}
        # Declare a lost node dead within a few seconds instead of Ray's ~30 s.
        return {
            **env,
            "RAY_TMPDIR": self.ray_tmp,
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_failure_threshold": "3",
        }

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def __enter__(self) -> Deployment:
        stack = self._stack
        try:
            self.ns = stack.enter_context(NetNamespace())
            stack.enter_context(_inside(self.ns))
            self.s3 = stack.enter_context(s3_server(self.root))  # the nodes' environment names its endpoint
            self.s3.create_bucket(BUCKET)
            # Ray's nodes need no database: they start (a thread, in this namespace too) while PostgreSQL and the
            # MLflow server do, which had waited for each other.
            with ThreadPoolExecutor(1) as pool:
                ray = pool.submit(self._start_ray)
                try:
                    self.pg = stack.enter_context(postgres_server())
                    for db in ("optuna", "mlflow"):
                        self.pg.create_database(db)
                    self.mlflow_port = free_port()
                    self.start_mlflow()
                    stack.callback(self.stop_mlflow)
                finally:
                    stack.callback(self._stop_ray)  # the first to stop, as whatever of Ray has started
                    ray.result()
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)

    def _start_ray(self) -> None:
        port = free_port()
        head = [
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "0",
            "--temp-dir",
            self.ray_tmp,
            "--include-dashboard=false",
        ]
        self.head = start_node(head, self.node_env())
        self.address = f"127.0.0.1:{port}"
        for _ in range(self.workers_wanted):  # one after the other: two started together, one's may exit 1
            self.add_worker()

    def _stop_ray(self) -> None:
        for proc in [*reversed(self.workers), *([self.head] if self.head else [])]:
            # SIGTERM, then SIGKILL after 3 s: the workers exit within 2 s, the head not even within 20 s (measured).
            kill_node(proc, grace=3)

    def start_mlflow(self) -> None:
        env = {
            **self.s3.env(),
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "PGPASSWORD": self.pg.password,
            # No job runner (its four huey consumers serve nothing here): the server is up in ~6 s instead of ~11 s.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        log = (self.root / "mlflow-server.log").open("ab")
        self.mlflow = subprocess.Popen(
            [
                MLFLOW, "server",
                "--backend-store-uri", f"postgresql://postgres@127.0.0.1:{self.pg.port}/mlflow",
                "--artifacts-destination", f"s3://{BUCKET}/mlflow",
                "--host", "127.0.0.1", "--port", str(self.mlflow_port), "--workers", "1",
            ],
            env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{self.tracking_uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.mlflow.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start: {(self.root / 'mlflow-server.log').read_text()[-3000:]}"
                )
            time.sleep(0.3)

    def stop_mlflow(self) -> None:
        proc, self.mlflow = self.mlflow, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # -- faults -------------------------------------------------------------------------------------------------
    def restart_postgres(self, down_s: float = 5.0, until: Callable[[], bool] | None = None) -> None:
        self.pg.restart(down_s=down_s, mode="fast", until=until)

    def crash_postgres(self, down_s: float = 5.0) -> None:
        self.pg.crash(down_s=down_s)

    def restart_mlflow(self, down_s: float = 3.0) -> None:
        self.stop_mlflow()
        time.sleep(down_s)
        self.start_mlflow()

    def crash_mlflow(self, down_s: float = 3.0) -> None:
        """SIGKILL the tracking server and its workers (no graceful end of a request in flight), then start it."""
        proc, self.mlflow = self.mlflow, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        time.sleep(down_s)
        self.start_mlflow()

    def kill_worker(self) -> list[str] | None:
        """SIGKILL a worker node that runs a trial, with everything on it; ``None`` when no worker runs one."""
        for proc in self.workers:
            if proc.poll() is None and any(is_trial(p) for p in descendants(proc.pid)):
                self.workers.remove(proc)
                return kill_node(proc)
        return None

    def add_worker(self) -> None:
        """A replacement worker node (as an autoscaler or an operator adds one after a machine is lost)."""
        self.workers.append(start_node(["--address", self.address, "--num-cpus", "1"], self.node_env()))

    # -- reading the stores back (PostgreSQL through its unix socket) -------------------------------------------
    def socket_url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.pg.root}&port={self.pg.port}"

    def query(self, sql: str, database: str = "mlflow") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(host=str(self.pg.root), port=self.pg.port, user="postgres", dbname=database) as con:
            return list(con.execute(sql).fetchall())

    def logged_epochs(self) -> int:
        """Epochs the study's trial runs logged so far (distinct run and step); 0 while the database is down."""
        try:
            rows = self.query("SELECT count(DISTINCT (run_uuid, step)) FROM metrics WHERE step > 0")
        except Exception:  # noqa: BLE001 - restarting
            return 0
        return int(rows[0][0])

    def tally(
        self, name: str, metric_of_stage: dict[str, str], searched: int, finals: int, epochs: int
    ) -> dict[str, int]:
        """What the stores hold of study (or table) ``name`` against ``searched`` search trials and ``finals`` final
        runs of ``epochs`` epochs each, lost and duplicated counted apart (a duplicate must not hide a loss):

        - ``runs_lost``: expected runs with no FINISHED run; ``runs_duplicated``: FINISHED runs beyond one per trial id,
          and beyond the expected count;
        - ``epochs_lost`` / ``epochs_duplicated``: (run, epoch) missing from / logged more than once in the FINISHED
          runs' metric histories;
        - ``optuna_lost`` / ``optuna_duplicated``: search trials missing from / beyond one per Ray trial id among the
          Optuna studies' finished (COMPLETE or PRUNED) trials (a table's cells are studies ``<name>.<arm>.<cell>``).
        """
        from collections import Counter

        from mlflow import MlflowClient

        client = MlflowClient(self.socket_url("mlflow"))
        experiment = client.get_experiment_by_name(name)
        runs = client.search_runs([experiment.experiment_id], max_results=50000) if experiment else []
        finished = [r for r in runs if r.data.tags.get(R.ROLE_TAG) == R.ROLE_TRIAL and r.info.status == "FINISHED"]
        per_trial = Counter((r.data.tags.get(R.STAGE, R.STAGE_SEARCH), r.data.tags.get(R.TRIAL_ID)) for r in finished)
        epochs_lost = epochs_duplicated = 0
        for run in finished:
            metric = metric_of_stage[run.data.tags.get(R.STAGE, R.STAGE_SEARCH)]
            steps = Counter(m.step for m in client.get_metric_history(run.info.run_id, metric))
            epochs_lost += sum(1 for e in range(1, epochs + 1) if steps[e] == 0)
            epochs_duplicated += sum(n - 1 for n in steps.values() if n > 1)
        runs_expected = searched + finals
        rows = self.query(
            "SELECT a.value_json FROM trials t JOIN studies s USING (study_id) JOIN trial_user_attributes a USING "
            f"(trial_id) WHERE (s.study_name = '{name}' OR s.study_name LIKE '{name}.%') "
            f"AND t.state IN ('COMPLETE', 'PRUNED') AND a.key = '{R.OPTUNA_RAY_TRIAL_ID}'",
            "optuna",
        )
        told = Counter(value for (value,) in rows)
        return {
            "runs_lost": max(0, runs_expected - len(per_trial)),
            "runs_duplicated": sum(n - 1 for n in per_trial.values()) + max(0, len(per_trial) - runs_expected),
            "epochs_lost": epochs_lost + max(0, runs_expected - len(per_trial)) * epochs,
            "epochs_duplicated": epochs_duplicated,
            "optuna_lost": max(0, searched - len(told)),
            "optuna_duplicated": sum(n - 1 for n in told.values()),
        }

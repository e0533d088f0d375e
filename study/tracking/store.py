"""The study's MLflow experiment and parent run (:class:`TrackingStore`), and the writes every run shares.

Split from :mod:`study.tracking.callback` (the Ray Tune callback) so that the store can be read without importing Ray; both
write only what :mod:`trainables.schema.record` names.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from study.tracking import peek as tracking_peek
from study.tracking.doors import mlflow_client
from study.tracking.guarded import create_once, mlflow_store_name
from trainables.schema import record as R

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "TrackingStore",
    "preload_in_background",
    "log_params",
    "param_value",
    "MAX_PARAM_LENGTH",
    "children_note",
    "write_children_note",
]

_MAX_PARAMS_PER_BATCH = 100
#: MLflow's limit on a param's (and a tag's) value.
MAX_PARAM_LENGTH = 6000
#: MLflow's limit on a tag's value (its store cuts a longer one): the parent's note of its children stays under it.
MAX_NOTE_LENGTH = 8000


#: What :class:`TrackingStore` imports (MLflow's client and its SQL store: ~2 s on an idle core).
_PRELOAD = ("mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.db.utils")


def preload_in_background() -> None:
    """Import MLflow in a daemon thread, so that it overlaps ``ray.init`` (which mostly waits for Ray's processes).

    Only imports: nothing is written, so a study refused afterwards leaves nothing behind. Ray is fully imported
    before ``ray.init`` and MLflow imports no Ray, so the two threads mostly import different modules; where both
    need the same one, Python's per-module import lock makes one wait for the other, and the first use of MLflow
    waits the same way for an import still in progress. A failure here is ignored: the same import then fails
    where MLflow is used, with its own error.
    """

    def run() -> None:
        with contextlib.suppress(Exception):
            for name in _PRELOAD:
                importlib.import_module(name)

    threading.Thread(target=run, name="mlflow-preload", daemon=True).start()


_missing_sqlite = tracking_peek.missing_sqlite


def _seed_sqlite_store(uri: str) -> None:
    """Give a new ``sqlite:///`` store its tables by copying an empty, migrated database instead of migrating.

    MLflow builds a new sqlite store by running its ~60 alembic migrations, which takes seconds (tens on a busy
    machine); the result only depends on the MLflow version. When ``$DMLSTUDY_CACHE_DIR`` names a directory, it is
    built there once per version, without the ``Default`` experiment (MLflow adds that itself when it opens the
    copy, with this store's artifact root), and every new store starts as a copy. Off by default: a study writes
    nothing outside its storage unless the user opts in. An existing store is never touched; on any file-system
    error MLflow creates the store as usual.
    """
    import os

    cache_dir = os.environ.get("DMLSTUDY_CACHE_DIR")
    if not cache_dir or not uri.startswith("sqlite:///"):
        return
    target = Path(uri.removeprefix("sqlite:///").split("?")[0])
    if target.exists() or not target.parent.is_dir():
        return
    import shutil
    import sqlite3
    import tempfile

    import mlflow

    cache = Path(cache_dir)
    template = cache / f"mlflow-{mlflow.__version__}-empty.db"
    try:
        if not template.exists():
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                fresh = Path(tmp) / "store.db"
                mlflow_client(f"sqlite:///{fresh}").search_experiments()  # the store exists and is migrated
                with sqlite3.connect(fresh) as con:
                    con.execute("DELETE FROM experiments WHERE experiment_id = 0")
                con.close()
                os.replace(fresh, template)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            copy = Path(tmp) / target.name
            shutil.copyfile(template, copy)
            os.link(copy, target)  # fails if a store appeared meanwhile: never overwrite one
    except OSError:
        return


def param_value(value: Any) -> str:
    return str(value)[:MAX_PARAM_LENGTH]


def log_params(client: MlflowClient, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(k, param_value(v)) for k, v in sorted(params.items())]
    for start in range(0, len(items), _MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=items[start : start + _MAX_PARAMS_PER_BATCH])


def _natural(name: str) -> list[Any]:
    """Sort key that puts ``trial 2`` before ``trial 10`` (``re.split`` with a group alternates text and digits)."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]


def _markdown_text(text: str) -> str:
    """``text`` as literal markdown (a link's label): its markup characters escaped."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def children_note(experiment_id: str, parent_id: str, children: list[tuple[str, str, str]]) -> str:
    """The parent run's description (:data:`~trainables.schema.record.NOTE_TAG`, markdown in MLflow's UI): its child
    runs, ``(name, run id, stage)``, listed by stage (search first) and name, each a link to the run in the UI. Past
    MLflow's limit on a tag the list stops with the filter that finds them all."""
    order = {R.STAGE_SEARCH: 0, R.STAGE_FINAL: 1}
    ranked = sorted(children, key=lambda c: (order.get(c[2], 2), c[2], _natural(c[0])))
    lines = [f"**{len(children)} runs** of this study (search, then final stage):", ""]
    rest = f"\n- … and {{}} more: filter the runs by `tags.\"{R.PARENT_TAG}\" = '{parent_id}'`"
    size = sum(len(line) + 1 for line in lines) + len(rest) + 8  # room for the closing line and its count
    for i, (name, run_id, _) in enumerate(ranked):
        line = f"- [{_markdown_text(name)}](#/experiments/{experiment_id}/runs/{run_id})"
        size += len(line) + 1
        if size > MAX_NOTE_LENGTH:
            return "\n".join(lines) + rest.format(len(ranked) - i)
        lines.append(line)
    return "\n".join(lines)


def write_children_note(client: MlflowClient, experiment_id: str, parent_id: str) -> str:
    """Write the parent's :func:`children_note` from the store as it is now (so a resume, whose deleted ghost runs
    drop out, writes it true again); one search, for the end of a stage, not per trial. Returns the note."""
    children: list[tuple[str, str, str]] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=f"tags.`{R.PARENT_TAG}` = '{parent_id}'", page_token=token
        )
        children += [(r.info.run_name, r.info.run_id, r.data.tags.get(R.STAGE, "")) for r in page]
        token = page.token
        if not token:
            break
    note = children_note(experiment_id, parent_id, children)
    client.set_tag(parent_id, R.NOTE_TAG, note)
    return note


class TrackingStore:
    """The study's MLflow experiment and parent run, created by the driver before any trial starts."""

    def __init__(self, uri: str, experiment_name: str, artifact_location: str | None = None) -> None:
        self.uri = uri
        self.experiment_name = experiment_name
        _seed_sqlite_store(uri)
        # For sqlite this creates the database (if not seeded) and its tables, once, here. Every call rides out an
        # outage of a tracking server or database (study.tracking.outage).
        client = mlflow_client(uri)
        experiment = client.get_experiment_by_name(experiment_name)
        if experiment is None:

            def found() -> str | None:
                existing = client.get_experiment_by_name(experiment_name)
                return None if existing is None else existing.experiment_id

            self.experiment_id = create_once(
                mlflow_store_name(uri),
                lambda: client.create_experiment(experiment_name, artifact_location=artifact_location),
                found,
            )
        else:
            if experiment.lifecycle_stage == "deleted":
                client.restore_experiment(experiment.experiment_id)
            self.experiment_id = experiment.experiment_id
        # MLflow 3's UI opens an experiment without this tag in its GenAI (traces) view; ours are training runs.
        client.set_experiment_tag(self.experiment_id, R.EXPERIMENT_KIND_TAG, R.EXPERIMENT_KIND)
        self.client = client

    @staticmethod
    def peek_parent_status(uri: str, experiment_name: str) -> str | None:
        """The status of a study's parent run, read without creating anything (``None``: no such run)."""
        return tracking_peek.parent_status(uri, experiment_name)

    def parent_run_id(self) -> str | None:
        """The study's parent run, if one exists (the most recent, should there be several)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{R.ROLE_TAG}` = '{R.ROLE_STUDY}'",
            order_by=["start_time DESC"],
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def start_parent(self, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """Create the parent run, or reopen the existing one when the study is resumed."""
        run_id = self.parent_run_id()
        if run_id is None:
            run_id = create_once(
                mlflow_store_name(self.uri),
                lambda: (
                    self.client.create_run(
                        self.experiment_id, run_name=run_name, tags={R.ROLE_TAG: R.ROLE_STUDY, **tags}
                    ).info.run_id
                ),
                self.parent_run_id,  # a lost answer's parent run is found by its role
            )
            log_params(self.client, run_id, params)
        else:
            self.client.update_run(run_id, status="RUNNING")
        return run_id

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """A small text artifact of a run (the final stage's summary table)."""
        self.client.log_text(run_id, text, artifact_file)

    @staticmethod
    def peek_parent_tags(uri: str, experiment_name: str) -> dict[str, str]:
        """The tags of a study's parent run, read without creating anything (empty: no such run)."""
        return tracking_peek.parent_tags(uri, experiment_name)

    @staticmethod
    def peek_failures(uri: str, experiment_name: str) -> list[tuple[str, str, str]]:
        """``(trial_id, stage, reason)`` of every FAILED trial run of a study, read without creating anything."""
        return tracking_peek.failures(uri, experiment_name)

    def end_parent_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        """Summary metrics of the study (no step): the final stage's mean, std and confidence interval."""
        for key, value in metrics.items():
            self.client.log_metric(run_id, key, value)

    def end_parent(self, run_id: str, status: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
        self.set_tags(run_id, tags)
        self.end_parent_metrics(run_id, metrics)
        self.client.set_terminated(run_id, status=status)

    def close_orphans(self, parent_id: str, status: str = "KILLED") -> int:
        """End child runs still RUNNING (left by a killed driver); returns how many."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{R.PARENT_TAG}` = '{parent_id}' and attributes.status = 'RUNNING'",
        )
        for run in runs:
            self.client.set_terminated(run.info.run_id, status=status)
        return len(runs)

"""MLflow wiring. This is the only module that imports ``mlflow`` (with :mod:`study.tracking_peek`, its read-only
half that ``--status`` imports without Ray).

One experiment per study (named after it), one parent run per study, one child run per Ray trial. All
writes happen in the driver: :class:`MlflowTrialCallback` turns each trial's ``tune.report`` into MLflow
metrics (``step`` = epoch). A single writer keeps a sqlite store safe under concurrent trials and lets
trials on remote nodes run without any access to the tracking store; trials ship files to MLflow through
their checkpoints instead.

The callback is restore-aware: a trial that already has a child run (found by its ``trial_id`` tag under
the study's parent run) keeps logging into it, and epochs already logged are not logged twice.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from schema import record as R
from schema.metric_names import ARTIFACTS_DIR, EPOCH
from study import tracking_peek

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from ray.tune.experiment import Trial

__all__ = ["TrackingStore", "MlflowTrialCallback", "RUN_TAGS", "error_line"]

RUN_TAGS = R.RUN_TAGS  # re-exported: the record's tags every child run carries
_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
# Keys Ray adds to every result; everything else numeric that a trial reports is a metric.
_RAY_RESULT_KEYS = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "pid",
        "time_since_restore",
        "iterations_since_restore",
        "done",
        "date",
        "hostname",
        "node_ip",
        "trial_id",
        "experiment_tag",
        "checkpoint_dir_name",
        "should_checkpoint",
        "config",
        EPOCH,
    }
)


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


_client = tracking_peek.client
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
                _client(f"sqlite:///{fresh}").search_experiments()  # the store exists and is migrated
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


def _param_value(value: Any) -> str:
    return str(value)[:_MAX_PARAM_LENGTH]


def _log_params(client: MlflowClient, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(k, _param_value(v)) for k, v in sorted(params.items())]
    for start in range(0, len(items), _MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=items[start : start + _MAX_PARAMS_PER_BATCH])


class TrackingStore:
    """The study's MLflow experiment and parent run, created by the driver before any trial starts."""

    def __init__(self, uri: str, experiment_name: str, artifact_location: str | None = None) -> None:
        self.uri = uri
        self.experiment_name = experiment_name
        _seed_sqlite_store(uri)
        client = _client(uri)  # for sqlite this creates the database (if not seeded) and its tables, once, here
        experiment = client.get_experiment_by_name(experiment_name)
        if experiment is None:
            self.experiment_id = client.create_experiment(experiment_name, artifact_location=artifact_location)
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
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={R.ROLE_TAG: R.ROLE_STUDY, **tags})
            run_id = run.info.run_id
            _log_params(self.client, run_id, params)
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


class MlflowTrialCallback(Callback):
    """Ray Tune callback: one MLflow child run per trial, per-epoch metrics, FINISHED / FAILED at the end.

    Args:
        uri: tracking URI.
        experiment_id: the study's experiment.
        parent_run_id: the study's parent run; children are nested under it.
        describe_trial: ``config → (params, tags)`` for a trial's child run (params = the trial's full
            flattened config; tags at least :data:`RUN_TAGS` minus ``trial_id``, and ``stage``).
        total_epochs: epochs of a full trial; a trial that ends earlier was stopped by the scheduler.
        stage: the study stage this callback's Tuner runs (``search`` or ``final``); the child runs it creates
            carry it as the ``stage`` tag, and only runs of this stage are reconciled on resume.
    """

    def __init__(
        self,
        uri: str,
        experiment_id: str,
        parent_run_id: str,
        describe_trial: Any,
        total_epochs: int,
        stage: str = R.STAGE_SEARCH,
    ) -> None:
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.describe_trial = describe_trial
        self.total_epochs = total_epochs
        self.stage = stage
        self._client: MlflowClient | None = None
        self._runs: dict[str, str] = {}
        self._last_step: dict[str, int] = {}
        self._checkpoints: dict[str, Any] = {}
        self._started_ms = int(time.time() * 1000)
        self._reconciled = False

    # Ray pickles callbacks into the experiment state; the client holds connections, so drop it.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = _client(self.uri)
        return self._client

    def _find_run(self, trial_id: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{R.TRIAL_ID} = '{trial_id}' and tags.`{R.PARENT_TAG}` = '{self.parent_run_id}'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def _logged_epochs(self, run_id: str) -> int:
        run = self.client.get_run(run_id)
        steps = [m.step for key in run.data.metrics for m in self.client.get_metric_history(run_id, key)]
        return max(steps, default=0)

    def run_id(self, trial: Trial) -> str:
        """The child run of ``trial``, created on first sight and reopened after a restart."""
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        run_id = self._find_run(trial.trial_id)
        if run_id is None:
            params, tags = self.describe_trial(trial.config)
            run = self.client.create_run(
                self.experiment_id,
                run_name=trial.trial_id,
                tags={R.PARENT_TAG: self.parent_run_id, R.ROLE_TAG: R.ROLE_TRIAL, R.TRIAL_ID: trial.trial_id, **tags},
            )
            run_id = run.info.run_id
            _log_params(self.client, run_id, params)
            self._last_step[trial.trial_id] = 0
        else:
            self.client.update_run(run_id, status="RUNNING")
            if not self.client.get_run(run_id).data.params:  # the driver died between create and params
                _log_params(self.client, run_id, self.describe_trial(trial.config)[0])
            self._last_step[trial.trial_id] = self._logged_epochs(run_id)
        self._runs[trial.trial_id] = run_id
        return run_id

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if not self._reconciled:
            self._reconciled = True
            self.delete_ghost_runs({t.trial_id for t in trials})

    def delete_ghost_runs(self, restored: set[str]) -> list[str]:
        """Delete child runs of trials that a killed driver started after Ray's last experiment snapshot.

        Ray forgets such trials on restore and samples new ones in their place, so their runs would be
        extra children that match no trial. Only runs created before this driver started are candidates.
        """
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{R.PARENT_TAG}` = '{self.parent_run_id}' and tags.{R.STAGE} = '{self.stage}' "
                f"and attributes.start_time < {self._started_ms}"
            ),
        )
        ghosts = [r.info.run_id for r in runs if r.data.tags.get(R.TRIAL_ID) not in restored]
        for run_id in ghosts:
            self.client.delete_run(run_id)
        return ghosts

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.run_id(trial)

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        from mlflow.entities import Metric

        run_id = self.run_id(trial)
        step = int(result.get(EPOCH, result.get("training_iteration", 0)))
        if step <= self._last_step.get(trial.trial_id, 0):
            return  # already logged before a restart
        now = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), now, step)
            for key, value in result.items()
            if key not in _RAY_RESULT_KEYS and isinstance(value, (int, float)) and not isinstance(value, bool)
        ]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        self._last_step[trial.trial_id] = step

    def on_checkpoint(self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: Any, **info: Any) -> None:
        self._checkpoints[trial.trial_id] = checkpoint

    def _log_artifacts(self, trial: Trial, run_id: str) -> None:
        """Upload the ``artifacts/`` folder of the trial's last checkpoint (works for remote storage too)."""
        checkpoint = self._checkpoints.pop(trial.trial_id, None) or trial.checkpoint
        if checkpoint is None:
            return
        with checkpoint.as_directory() as directory:
            folder = Path(directory) / ARTIFACTS_DIR
            if folder.is_dir() and any(folder.iterdir()):
                self.client.log_artifacts(run_id, str(folder))

    def _end(self, trial: Trial, status: str, tags: dict[str, str]) -> None:
        run_id = self.run_id(trial)
        try:
            self._log_artifacts(trial, run_id)
        except Exception as e:  # noqa: BLE001 - a failed upload must not lose the run's status
            tags = {**tags, R.ARTIFACT_ERROR: str(e)[:_MAX_PARAM_LENGTH]}
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        self.client.set_terminated(run_id, status=status)
        self._runs.pop(trial.trial_id, None)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        epochs = int((trial.last_result or {}).get(EPOCH, 0))
        self._end(
            trial, "FINISHED", {R.STOPPED_EARLY: str(epochs < self.total_epochs).lower(), R.EPOCHS_DONE: str(epochs)}
        )

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._end(trial, "FAILED", {R.FAILURE_REASON: _error_summary(trial)})

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial_id, run_id in list(self._runs.items()):
            self.client.set_terminated(run_id, status="KILLED")
            self._runs.pop(trial_id)


def _error_summary(trial: Trial) -> str:
    """The last line of the trial's exception (its type and message), for a tag."""
    # Ray writes the trace to the trial's local error file before it calls on_trial_error; the copy in
    # the storage path (``get_error``) may not be synced yet.
    text = "unknown error"
    try:
        if trial.error_file:
            with open(trial.error_file) as f:
                text = f.read()
    except OSError:
        pass
    return error_line(text)[:_MAX_PARAM_LENGTH]


def error_line(text: str) -> str:
    """The line of a traceback that names the exception (its last line): ``DataError: ...``."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"

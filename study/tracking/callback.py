"""MLflow wiring: the Ray Tune callback that writes the trial runs. With :mod:`study.tracking.store` (the study's
experiment and parent run) and :mod:`study.tracking.peek` (the read-only half that ``--status`` imports without Ray),
the only modules that import ``mlflow``; every tag and value they write is named in :mod:`trainables.schema.record`.

One experiment per study (named after it), one parent run per study, one child run per Ray trial. All
writes happen in the driver: :class:`MlflowTrialCallback` turns each trial's ``tune.report`` into MLflow
metrics (``step`` = epoch). A single writer keeps a sqlite store safe under concurrent trials and lets
trials on remote nodes run without any access to the tracking store; trials ship files to MLflow through
their checkpoints instead.

Every hook Ray calls carries a store outage past its budget out of Ray's loop (:func:`study.tracking.outage.through_ray`),
so it ends the driver with its one line instead of failing the trial whose write it was.

The callback is restore-aware: a trial that already has a child run (found by its ``trial_id`` tag under
the study's parent run) keeps logging into it, and epochs already logged are not logged twice.

Runs are named for a person (:func:`trial_run_name`: ``ms.p0.2 · trial 7``, ``final · seed 3``), not by Ray's random
trial ids; when a stage's Tuner ends, the parent's description lists its children with links
(:func:`study.tracking.store.write_children_note`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from study.runtime.shells import PickledAsDiscarded
from study.tracking.doors import mlflow_client
from study.tracking.guarded import create_once, mlflow_store_name
from study.tracking.outage import through_ray
from study.tracking.store import MAX_PARAM_LENGTH, log_params, write_children_note
from trainables.schema import record as R
from trainables.schema.metric_names import EPOCH
from trainables.schema.record import ARTIFACTS_DIR
from trainables.schema.trial import CELL_KEY, FINAL_KEY, RACE_KEY, SPEC_KEY, trial_stage

if TYPE_CHECKING:
    from collections.abc import Callable

    from mlflow import MlflowClient
    from ray.tune.experiment import Trial

__all__ = ["MlflowTrialCallback", "error_line", "trial_run_name"]

#: Each stage's Ray experiment (a trial run's :data:`~trainables.schema.record.RAY_EXPERIMENT` tag).
_EXPERIMENTS = {R.STAGE_SEARCH: R.SEARCH_EXPERIMENT, R.STAGE_RACE: R.RACE_EXPERIMENT, R.STAGE_FINAL: R.FINAL_EXPERIMENT}

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


@dataclass(frozen=True)
class ParentRun:
    """Where a stage's child runs go: the tracking ``uri``, the study's ``experiment_id``, and its parent ``run_id``
    (children are nested under it)."""

    uri: str
    experiment_id: str
    run_id: str


class MlflowTrialCallback(PickledAsDiscarded, Callback):
    """Ray Tune callback: one MLflow child run per trial, per-epoch metrics, FINISHED / FAILED at the end.

    Args:
        parent: the tracking URI, the study's experiment and its parent run (:class:`ParentRun`).
        describe_trial: ``config → (params, tags)`` for a trial's child run (params = the trial's full
            flattened config; tags at least :data:`~trainables.schema.record.RUN_TAGS` minus ``trial_id``, and ``stage``).
        total_epochs: epochs of a full trial; a trial that ends earlier was stopped by the scheduler.
        stage: the tag of the study stage this callback's Tuner runs (``search``, ``final``, ...); the child runs it creates
            carry it as the ``stage`` tag, and only runs of this stage are reconciled on resume.
        on_run: called with ``(ray trial id, run id)`` when a search trial's run is created or reopened; returns
            tags for the run (the search links its Optuna trials and runs both ways:
            :class:`study.tracking.optuna_link.OptunaRunLink`).

    The Ray experiment of the callback's Tuner is its stage's (:data:`~trainables.schema.record.SEARCH_EXPERIMENT` or
    ``FINAL_EXPERIMENT``): each run it creates is tagged with it, and on resume it reconciles its own experiment's runs
    (a table's search experiment runs final trials too).
    """

    def __init__(
        self,
        parent: ParentRun,
        describe_trial: Any,
        total_epochs: int,
        stage: str = R.STAGE_SEARCH,
        on_run: Callable[[str, str], dict[str, str]] | None = None,
    ) -> None:
        self.on_run = on_run
        self.ray_experiment = _EXPERIMENTS.get(stage, R.FINAL_EXPERIMENT)
        self.uri = parent.uri
        self.experiment_id = parent.experiment_id
        self.parent_run_id = parent.run_id
        self.describe_trial = describe_trial
        self.total_epochs = total_epochs
        self.stage = stage
        self._client: MlflowClient | None = None
        self._runs: dict[str, str] = {}
        self._last_step: dict[str, int] = {}
        self._checkpoints: dict[str, Any] = {}
        self._started_ms = int(time.time() * 1000)
        self._reconciled = False

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = mlflow_client(self.uri)
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
            name = trial_run_name(trial.config, trial.trial_id)  # a search trial's number comes with its link below
            params, tags = self.describe_trial(trial.config)
            tags = {R.PARENT_TAG: self.parent_run_id, R.ROLE_TAG: R.ROLE_TRIAL, R.TRIAL_ID: trial.trial_id, **tags}
            tags[R.RAY_EXPERIMENT] = self.ray_experiment
            run_id = create_once(
                mlflow_store_name(self.uri),
                lambda: self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id,
                lambda: self._find_run(trial.trial_id),  # a lost answer's run is found by its Ray trial id
            )
            log_params(self.client, run_id, params)
            self._last_step[trial.trial_id] = 0
        else:
            self.client.update_run(run_id, status="RUNNING")
            if not self.client.get_run(run_id).data.params:  # the driver died between create and params
                log_params(self.client, run_id, self.describe_trial(trial.config)[0])
            self._last_step[trial.trial_id] = self._logged_epochs(run_id)
        self._runs[trial.trial_id] = run_id
        if self.on_run is not None and trial_stage(trial.config) == R.STAGE_SEARCH:
            linked = self.on_run(trial.trial_id, run_id)
            for key, value in linked.items():
                self.client.set_tag(run_id, key, value)
            if R.OPTUNA_TRIAL_NUMBER in linked:  # the same number on every resume: the same name
                self.client.update_run(run_id, name=trial_run_name(trial.config, linked[R.OPTUNA_TRIAL_NUMBER]))
        return run_id

    @through_ray
    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if not self._reconciled:
            self._reconciled = True
            if self.delete_ghost_runs({t.trial_id for t in trials}):
                self.describe_parent()  # its list named the deleted runs

    def delete_ghost_runs(self, restored: set[str]) -> list[str]:
        """Delete child runs of trials that a killed driver started after Ray's last experiment snapshot.

        Ray forgets such trials on restore and samples new ones in their place, so their runs would be
        extra children that match no trial. Only runs created before this driver started are candidates.
        """
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{R.PARENT_TAG}` = '{self.parent_run_id}' and attributes.start_time < {self._started_ms}",
        )
        mine = [r for r in runs if self._reconciles(r.data.tags)]
        ghosts = [r.info.run_id for r in mine if r.data.tags.get(R.TRIAL_ID) not in restored]
        for run_id in ghosts:
            self.client.delete_run(run_id)
        return ghosts

    def _reconciles(self, tags: dict[str, str]) -> bool:
        """Whether a run is a trial of this callback's experiment: by its tag, or (a run from before the tag) by its
        stage."""
        if R.RAY_EXPERIMENT in tags:
            return tags[R.RAY_EXPERIMENT] == self.ray_experiment
        return tags.get(R.STAGE) == self.stage

    @through_ray
    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.run_id(trial)

    @through_ray
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

    @through_ray
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
            tags = {**tags, R.ARTIFACT_ERROR: str(e)[:MAX_PARAM_LENGTH]}
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        self.client.set_terminated(run_id, status=status)
        self._runs.pop(trial.trial_id, None)

    @through_ray
    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        epochs = int((trial.last_result or {}).get(EPOCH, 0))
        self._end(
            trial, "FINISHED", {R.STOPPED_EARLY: str(epochs < self.total_epochs).lower(), R.EPOCHS_DONE: str(epochs)}
        )

    @through_ray
    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._end(trial, "FAILED", {R.FAILURE_REASON: _error_summary(trial)})

    def describe_parent(self) -> str:
        """Rewrite the parent's description: its child runs by name, with links (read back from the store, so it holds
        every stage's runs and none a resume deleted). Returns the note."""
        return write_children_note(self.client, self.experiment_id, self.parent_run_id)

    @through_ray
    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial_id, run_id in list(self._runs.items()):
            self.client.set_terminated(run_id, status="KILLED")
            self._runs.pop(trial_id)
        self.describe_parent()  # once a stage, not per trial: one search over the parent's runs


def trial_run_name(config: dict[str, Any], number: int | str) -> str:
    """The name of a trial's run, from its Ray config (:func:`~trainables.schema.record.search_run_name`,
    :func:`~trainables.schema.record.final_run_name`): a search trial is ``trial <number>`` (its Optuna number within
    its cell; the Ray trial id until it is known), a final trial ``final · seed <seed>``; each led by its cell or group
    where the run has several, i.e. unless it is the study's own (its name, or the one group ``all``)."""
    study = (config.get(SPEC_KEY) or {}).get("name")
    if RACE_KEY in config:
        point = config[RACE_KEY]
        group = str(point[R.GROUP])
        number = point.get("number")
        return R.race_run_name(
            point[R.SOURCE_TRIAL] if number is None else number,
            int(point["params"]["seed"]),
            None if group in (R.GROUP_ALL, study) else group,
        )
    if FINAL_KEY in config:
        point = config[FINAL_KEY]
        group = str(point[R.GROUP])
        return R.final_run_name(int(point["params"]["seed"]), None if group in (R.GROUP_ALL, study) else group)
    cell = config.get(CELL_KEY)
    return R.search_run_name(number, None if cell == study else cell)


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
    return error_line(text)[:MAX_PARAM_LENGTH]


def error_line(text: str) -> str:
    """The line of a traceback that names the exception (its last line): ``DataError: ...``."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"

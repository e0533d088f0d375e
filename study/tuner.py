"""Ray Tune orchestration: one study = a search Tuner driven by OptunaSearch, then a final-stage Tuner that
retrains the best configuration with several seeds (:mod:`study.final_stage`), both tracked in MLflow. Where the
study's files live is :mod:`study.layout`.

``storage`` may be a local path, a shared mount (NFS, Lustre, a FUSE bucket) or an ``s3://``/``gs://`` URI
(any pyarrow filesystem). A URI cannot hold the sqlite stores, so it requires ``tracking.uri`` and
``tracking.optuna_uri`` (servers both); ``spec.yaml``, the ASHA state and Ray's experiment go to the URI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from schema import record as R
from schema.errors import SpecError, StudyError, StudyExistsError
from schema.metric_names import EPOCH, TEST_PREFIX, VAL_PREFIX
from schema.spec import StudySpec
from schema.trial import FINAL_KEY, SPEC_KEY, flatten, sampled_values, trial_stage
from study.bookkeeping import PersistentASHA, StudySearch
from study.cluster_connect import connect_error, private_instance_token, probe_cluster
from study.compat import restored_run_config
from study.credentials import RedactedRDBStorage, check_tracking_env, redacted_spec
from study.data import ensure_pretrained
from study.final_stage import (
    FinalGroup,
    best_per_group,
    best_result,
    final_points,
    result_trial_id,
    results_of,
    summarize_final,
    summary_csv,
)
from study.layout import FINAL_EXPERIMENT, StudyLayout
from study.lock import study_lock
from study.progress import ProgressTable
from study.search_space import make_sampler, to_optuna
from study.storage import is_shared_path, read_bytes, write_bytes
from study.store_errors import quiet_store_failures
from study.tracking import MlflowTrialCallback, TrackingStore, error_line, preload_in_background
from study.validation import spec_from_tune_config, trial_params
from study.watchdog import PendingTimeout, check_cluster_resources, check_local_resources

if TYPE_CHECKING:
    from collections.abc import Callable

    from ray.tune import ResultGrid

__all__ = ["StudyOutcome", "run_study", "describe_trial", "browse_commands"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StudyOutcome:
    """What a finished (or interrupted) study produced."""

    num_trials: int
    num_failed: int
    best_trial_id: str | None
    best_value: float | None
    best_params: dict[str, Any]
    parent_run_id: str
    interrupted: bool
    wall_time_s: float
    #: The final test stage's groups (empty when it was skipped or did not run).
    final: list[FinalGroup] = field(default_factory=list)
    #: The study's MLflow experiment.
    experiment_id: str = ""
    #: ``(trial_id, the line naming its exception)`` of every failed trial, search and final stage.
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.num_trials - self.num_failed > 0 and not self.interrupted


def describe_trial(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """MLflow params (the trial's full flattened config) and grouping tags of one trial."""
    spec = spec_from_tune_config(config)
    noise = spec.dataset.noise
    stage = trial_stage(config)
    tags = {
        "study": spec.name,
        "family": spec.family,
        "dataset": spec.dataset.name,
        "noise_kind": noise.kind,
        "noise_ratio": str(noise.ratio if noise.kind != "none" else 0.0),
        "subset": spec.dataset.subset,
        "seed": str(spec.seed),
        R.STAGE: stage,
        "validation": spec.validation.kind if stage == "search" else "none",
        "val_labels": spec.validation.labels,
        "selection": selection_tag(spec),
    }
    if stage == R.STAGE_FINAL:
        tags[R.GROUP] = config[FINAL_KEY][R.GROUP]
        tags[R.SOURCE_TRIAL] = config[FINAL_KEY][R.SOURCE_TRIAL]
    return trial_params(spec), tags


def selection_tag(spec: StudySpec) -> str:
    """Where the study's hyperparameters are selected: ``validation`` classes, or (``kind: none``) ``test``."""
    return "validation" if spec.validation.enabled else "test"


def trial_spec_data(spec: StudySpec) -> dict[str, Any]:
    """What a trial is given of the spec (Ray writes it to every trial's ``params.json``): all but ``tracking``,
    which stays with the driver (it alone writes to MLflow and Optuna) and may hold credentials."""
    return spec.model_dump(mode="json", exclude={"tracking"})


def _trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


def _check_resume(spec: StudySpec, layout: StudyLayout, resume: bool) -> bool:
    """Decide between a new study and a resumed one; refuse the ambiguous cases. Returns ``resuming``."""
    from ray.tune import Tuner

    restorable = Tuner.can_restore(layout.tune_dir)
    # spec.yaml without Ray's state: a driver died before Tune's first snapshot, so no trial has run yet.
    exists = restorable or read_bytes(layout.spec_file) is not None
    if exists and not resume:
        raise StudyExistsError(
            f"study {spec.name!r} already exists in {layout.root}; run again with --resume to continue it, "
            "or change `name` or `storage` to start a new one"
        )
    if resume and not exists:
        raise StudyExistsError(f"--resume: there is no study {spec.name!r} in {layout.root} to resume")
    if exists:
        saved = flatten(yaml.safe_load(read_bytes(layout.spec_file) or b"{}"))
        current = flatten(redacted_spec(spec))
        changed = sorted(k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k))
        if changed:
            raise StudyExistsError(
                f"--resume: the spec differs from the one study {spec.name!r} was started with at "
                f"{', '.join(changed[:5])}; a resumed study must keep its spec"
            )
    return restorable


def _connect_ray(address: str | None) -> bool:
    """Connect to ``address`` / ``RAY_ADDRESS``, or start a private local instance. True if we called init."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    # Every epoch checkpoints by design; Ray warns about frequent experiment snapshots otherwise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Snapshot the experiment (trials + searcher) every second instead of Ray's ≥ 10 s, so a killed driver
    # forgets as little as possible; what it still forgets is reconciled on resume (StudySearch.restore,
    # MlflowTrialCallback's ghost runs).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    # A reused worker (reuse_actors) first waits for the previous trial's thread to end, 2 s by default, and fails
    # the next trial if it has not: an early-stopped trial tearing down its DataLoader workers on a busy node can
    # take longer. Workers of a local instance inherit this; on a cluster, set it where Ray starts.
    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", "60")
    if address != "local":
        probe_cluster(address)  # unreachable or a missing token: one line now, not a minute of retries
    else:
        private_instance_token()
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    except Exception as e:
        if address == "local" or (line := connect_error(e, address)) is None:
            raise
        raise StudyError(line) from None
    return True


def _check_storage_reachable(layout: StudyLayout, shared_storage: bool) -> None:
    """Refuse a node-local storage path when the cluster has more than one node."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) <= 1 or layout.remote or shared_storage or is_shared_path(Path(layout.root).parent):
        return
    raise SpecError(
        f"storage: {layout.root} is on a local disk but the Ray cluster has {len(nodes)} nodes, whose trials "
        "could not write their checkpoints there; use a shared mount (NFS) or an s3:// / gs:// URI, or pass "
        "--shared-storage if this path is shared"
    )


def _build_tuner(
    spec: StudySpec,
    layout: StudyLayout,
    callback: MlflowTrialCallback,
    resuming: bool,
    max_failures: int,
    pending_timeout_s: float,
) -> Any:
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    from trainables.loop import train_fn

    trainable = tune.with_resources(train_fn, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
    param_space = {SPEC_KEY: trial_spec_data(spec)}
    s = spec.search
    callbacks = [
        callback,
        ProgressTable(s.metric, s.mode, s.num_trials, spec.train.epochs, list(s.space)),
        PendingTimeout(pending_timeout_s),
    ]
    failure_config = tune.FailureConfig(max_failures=max_failures)
    if resuming:
        tuner = tune.Tuner.restore(
            layout.tune_dir, trainable, resume_unfinished=True, resume_errored=False, param_space=param_space
        )
        # The restored run config is the pickle taken at the study's start: give it this driver's callbacks
        # (fresh MLflow client, parent run reopened) and this invocation's retry budget. Ray offers no
        # public setter; the searcher and scheduler are restored as pickled (see StudySearch, PersistentASHA).
        run_config = restored_run_config(tuner)
        run_config.callbacks = callbacks
        run_config.failure_config = failure_config
        return tuner
    searcher = StudySearch(
        space=to_optuna(s.space),
        metric=s.metric,
        mode=s.mode,
        sampler=make_sampler(s.sampler, s.space),
        study_name=spec.name,
        storage=RedactedRDBStorage(layout.optuna_url),
        max_t=spec.train.epochs,
    )
    if s.scheduler.type == "asha":
        scheduler = PersistentASHA(
            time_attr="training_iteration",
            max_t=spec.train.epochs,
            grace_period=min(s.scheduler.grace_period, spec.train.epochs),
            reduction_factor=s.scheduler.reduction_factor,
            state_file=layout.asha_state,
        )
    else:
        scheduler = FIFOScheduler()  # type: ignore[assignment]
    return tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(
            metric=s.metric,
            mode=s.mode,
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=s.num_trials,
            max_concurrent_trials=s.max_concurrent,
            trial_dirname_creator=_trial_dirname,
            # One worker process runs trial after trial (Ray resets its session): imports, the dataset and the first
            # calls are paid once per worker, not per trial (docs/performance.md). An errored trial's actor is never
            # reused, and the NaN marker lives in the trial's storage directory (trainables.loop).
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=layout.root,
            callbacks=callbacks,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            failure_config=failure_config,
            verbose=0,  # ProgressTable replaces Ray's reporter, which prints the whole spec per trial
        ),
    )


def _trial_callback(
    spec: StudySpec, layout: StudyLayout, store: TrackingStore, parent: str, stage: str
) -> MlflowTrialCallback:
    """The driver-side MLflow writer of one stage's Tuner: child runs under ``parent``, tagged with ``stage``."""
    return MlflowTrialCallback(
        uri=layout.tracking_uri,
        experiment_id=store.experiment_id,
        parent_run_id=parent,
        describe_trial=describe_trial,
        total_epochs=spec.train.epochs,
        stage=stage,
    )


def _final_metric(spec: StudySpec) -> str:
    """The test metric the final stage's progress table shows: the search metric on the test split."""
    metric = spec.search.metric
    return TEST_PREFIX + metric.removeprefix(VAL_PREFIX) if metric.startswith(VAL_PREFIX) else metric


def _run_final_stage(
    spec: StudySpec,
    layout: StudyLayout,
    store: TrackingStore,
    parent: str,
    search: ResultGrid,
    max_failures: int,
    pending_timeout_s: float,
    failures: list[tuple[str, str]],
) -> tuple[list[FinalGroup], bool]:
    """Retrain each group's best configuration with ``final.seeds`` seeds on all training classes, evaluate on the
    test classes, and log the summary to the parent run. Resumable: a restored driver continues Ray's final
    experiment, whose points are the same (the search's results are). Returns the groups and ``interrupted``; adds the
    failed final trials to ``failures``."""
    from ray import tune

    from trainables.loop import train_fn

    best = best_per_group(spec, search)
    points = final_points(spec, best)
    if not points:
        return [], False
    store.set_tags(parent, {R.STAGE: R.STAGE_FINAL, R.FINAL_PLANNED: str(len(points))})
    callback = _trial_callback(spec, layout, store, parent, stage="final")
    metric = _final_metric(spec)
    callbacks = [
        callback,
        ProgressTable(metric, spec.search.mode, len(points), spec.train.epochs, []),
        PendingTimeout(pending_timeout_s),
    ]
    trainable = tune.with_resources(train_fn, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
    param_space = {SPEC_KEY: trial_spec_data(spec), FINAL_KEY: tune.grid_search(points)}
    failure_config = tune.FailureConfig(max_failures=max_failures)
    if tune.Tuner.can_restore(layout.final_dir):
        tuner = tune.Tuner.restore(
            layout.final_dir, trainable, resume_unfinished=True, resume_errored=False, param_space=param_space
        )
        run_config = restored_run_config(tuner)  # as in _build_tuner: this driver's callbacks and retries
        run_config.callbacks = callbacks
        run_config.failure_config = failure_config
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(
                max_concurrent_trials=spec.search.max_concurrent,
                trial_dirname_creator=_trial_dirname,
                reuse_actors=True,  # as in _build_tuner
            ),
            run_config=tune.RunConfig(
                name=FINAL_EXPERIMENT,
                storage_path=layout.root,
                callbacks=callbacks,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                failure_config=failure_config,
                verbose=0,
            ),
        )
    results = tuner.fit()
    groups = summarize_final(spec, results, best)
    ended = sum(
        r.error is not None or int((r.metrics or {}).get(EPOCH, 0)) >= spec.train.epochs for r in results_of(results)
    )
    interrupted = ended < len(points)
    failures.extend(failures_of(results))
    if len(groups) == 1:  # one group: its summary is the study's result, on the parent run itself
        store.end_parent_metrics(parent, {k: v for k, v in groups[0].summary().items() if v == v})
    store.log_text(parent, summary_csv(groups), R.FINAL_SUMMARY_FILE)
    return groups, interrupted


def _summarize(spec: StudySpec, results: ResultGrid, parent_run_id: str, wall: float) -> StudyOutcome:
    s = spec.search
    best = best_result(spec, results)  # study.best's rule: best last value, ties to the smallest trial id
    sampled = sampled_values(best.config or {}) if best is not None else {}
    return StudyOutcome(
        num_trials=len(results),
        num_failed=results.num_errors,
        best_trial_id=result_trial_id(best) if best is not None else None,
        best_value=float((best.metrics or {})[s.metric]) if best is not None else None,
        best_params=sampled,
        parent_run_id=parent_run_id,
        interrupted=len(results) < s.num_trials,
        wall_time_s=wall,
        failures=failures_of(results),
    )


def failures_of(results: ResultGrid) -> list[tuple[str, str]]:
    """``(trial_id, reason)`` of each failed trial: the line of its traceback naming the exception."""
    return [(result_trial_id(r), error_line(str(r.error))) for r in results_of(results) if r.error is not None]


def run_study(
    spec: StudySpec,
    *,
    resume: bool = False,
    address: str | None = None,
    max_failures: int = 0,
    shared_storage: bool = False,
    pending_timeout_s: float = 600.0,
    on_start: Callable[[], None] | None = None,
) -> StudyOutcome:
    """Run (or resume) the study ``spec`` to completion and return its outcome.

    Args:
        spec: the validated study.
        resume: continue the existing study of this name (``Tuner.restore``).
        address: Ray cluster to connect to (default ``$RAY_ADDRESS``, else a private local instance).
        max_failures: restarts of a trial from its last checkpoint after an error (a lost node, say).
        shared_storage: vouch that a local-looking ``storage`` path is shared by every node.
        pending_timeout_s: fail the study (:class:`StudyStalledError`) when trials have waited this long for resources
            with none running (0: wait forever).
        on_start: called once every input check passed, just before anything is written (the CLI warns there).

    Raises :class:`StudyError` subclasses for user errors before anything is written or started
    (:class:`StudyLockedError` when another driver runs the study).
    """
    layout = StudyLayout.for_spec(spec)
    check_tracking_env(spec)
    from trainables.checks import check_inputs
    from trainables.data import check_dataset

    # The driver downloads missing ImageNet weights (model.download; trials never do), after checking the data root.
    ensure_pretrained(spec.model, before_download=lambda: check_dataset(spec.dataset))
    check_inputs(spec)  # the data root and pretrained weights, before anything is written or Ray starts
    local = (address or os.environ.get("RAY_ADDRESS") or "local") == "local"
    if local:
        check_local_resources(spec)
    quiet_store_failures()  # a full disk is one line from the CLI, not every library's traceback
    with study_lock(layout.root):
        resuming = _check_resume(spec, layout, resume)
        preload_in_background()
        started_ray = _connect_ray(address)
        import ray

        try:
            _check_storage_reachable(layout, shared_storage)
            unfit = check_cluster_resources(spec, ray.nodes(), local=local)
            if unfit is not None:
                print(f"warning: {unfit}; trials wait for an autoscaler up to --pending-timeout", file=sys.stderr)
        except SpecError:
            if started_ray:
                ray.shutdown()
            raise
        return _run_validated(spec, layout, resuming, started_ray, max_failures, pending_timeout_s, on_start)


def _run_validated(
    spec: StudySpec,
    layout: StudyLayout,
    resuming: bool,
    started_ray: bool,
    max_failures: int,
    pending_timeout_s: float,
    on_start: Callable[[], None] | None,
) -> StudyOutcome:
    """:func:`run_study` once every input check passed, under the study's lock, with Ray connected."""
    # Everything is validated: from here on we write.
    if on_start is not None:
        on_start()
    layout.mkdir()
    if not resuming:
        write_bytes(layout.spec_file, yaml.safe_dump(redacted_spec(spec), sort_keys=False).encode())
    store = TrackingStore(layout.tracking_uri, spec.name, layout.artifact_location)
    parent = store.start_parent(
        run_name=spec.name,
        params=flatten(
            spec.model_dump(mode="json", include={"family", "search", "validation", "final", "resources", "storage"})
        ),
        tags={
            "family": spec.family,
            "dataset": spec.dataset.name,
            R.STUDY_DIR: layout.root,
            "selection": selection_tag(spec),
            "validation": spec.validation.kind,
            "val_labels": spec.validation.labels,
        },
    )
    store.close_orphans(parent)  # runs a killed driver left RUNNING
    callback = _trial_callback(spec, layout, store, parent, stage="search")
    started = time.perf_counter()
    try:
        store.set_tags(parent, {R.STAGE: R.STAGE_SEARCH} if not resuming else {})
        results = _build_tuner(spec, layout, callback, resuming, max_failures, pending_timeout_s).fit()
        outcome = _summarize(spec, results, parent, time.perf_counter() - started)
        outcome = dataclasses.replace(outcome, experiment_id=store.experiment_id)
        if outcome.succeeded and spec.final.seeds > 0:
            groups, final_interrupted = _run_final_stage(
                spec, layout, store, parent, results, max_failures, pending_timeout_s, outcome.failures
            )
            outcome = dataclasses.replace(
                outcome, final=groups, interrupted=final_interrupted, wall_time_s=time.perf_counter() - started
            )
    except BaseException:
        # The driver itself broke: no run may stay RUNNING. A store that broke (a full disk) cannot record that
        # either: the original error is the one to report, and --resume closes what stays RUNNING.
        with contextlib.suppress(Exception):
            store.close_orphans(parent, status="FAILED")
            store.end_parent(parent, "FAILED", {}, {})
        raise
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    status = "FINISHED" if outcome.succeeded else ("KILLED" if outcome.interrupted else "FAILED")
    store.close_orphans(parent, status="KILLED")
    metrics = {"num_trials": float(outcome.num_trials), "num_failed": float(outcome.num_failed)}
    if outcome.best_value is not None:
        metrics[R.best_metric(spec.search.metric)] = outcome.best_value
    tags = {R.BEST_TRIAL_ID: outcome.best_trial_id or ""}
    if outcome.succeeded:
        tags[R.STAGE] = R.STAGE_DONE
    store.end_parent(parent, status, metrics, tags)
    return outcome


def browse_commands(spec: StudySpec, experiment_id: str = "") -> list[str]:
    """Shell commands that open this study in the MLflow UI and in optuna-dashboard.

    The MLflow 3.17 UI opens in its GenAI view unless the address asks for the training runs
    (``workflowType=machine_learning``; the ``mlflow.experimentKind`` tag alone does not switch a fresh browser).
    """
    layout = StudyLayout.for_spec(spec)
    served = layout.tracking_uri.startswith(("http://", "https://"))
    host = layout.tracking_uri.rstrip("/") if served else "http://127.0.0.1:5000"
    runs = f"{host}/#/experiments/{experiment_id}/runs?workflowType=machine_learning" if experiment_id else host
    mlflow = f"open {runs}" if served else f"mlflow ui --backend-store-uri {layout.tracking_uri}, then open {runs}"
    return [mlflow, f"optuna-dashboard {layout.optuna_url}"]

"""Ray Tune orchestration: a run is its plan's stages in run order (:mod:`study.search.stages`: the search, then the
stages its spec asks for, each in a Tuner of its own), tracked in MLflow. The Tuners are wired in
:mod:`study.search.tuners`, Ray is connected by :mod:`study.runtime.cluster`, a resume is checked by
:mod:`study.search.resume`; where the study's files live is :mod:`study.intake.layout`.

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
from typing import TYPE_CHECKING

import yaml

from study.console import StudyLog, library_log
from study.data import ensure_pretrained
from study.intake.layout import StudyLayout
from study.intake.plan import StudyPlan
from study.runtime import stopping
from study.runtime.cluster import check_storage_reachable, connect_ray, shutdown_ray
from study.runtime.compat import snapshot_failed_trials
from study.runtime.lock import study_lock
from study.runtime.stop_callback import RayLossWatch, caused_by_stop
from study.runtime.stopping import StudyStopped, check_stop
from study.runtime.storage import read_bytes, write_bytes
from study.runtime.store_errors import quiet_store_failures
from study.runtime.watchdog import PrivateRayWatch, check_cluster_resources, check_local_resources
from study.search.context import RunOptions, StudyContext
from study.search.environment import numerics_tags
from study.search.outcome import StageProgress, StudyOutcome
from study.search.resume import check_resume, written_text
from study.search.stages import StageResult, StageRun, stages_of
from study.search.trial_record import describe_trial, selection_tag
from study.tracking.credentials import check_tracking_env, redacted_spec
from study.tracking.outage import set_budget
from study.tracking.preflight import preflight_stores
from study.tracking.store import TrackingStore, preload_in_background
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.spec import StudySpec
from trainables.schema.trial import flatten

if TYPE_CHECKING:
    from collections.abc import Callable


__all__ = ["StageProgress", "StudyOutcome", "run_study", "describe_trial", "browse_commands"]

log = logging.getLogger(__name__)


def run_study(
    run: StudyPlan | StudySpec,
    *,
    options: RunOptions | None = None,
    on_start: Callable[[], None] | None = None,
) -> StudyOutcome:
    """Run (or resume) a plan (or a study spec: its plan) to completion and return its outcome.

    Args:
        run: what the search searches (:class:`~study.intake.plan.StudyPlan`: a table's cells, a study's one or its
            replicates), or a validated study spec, run as :meth:`~study.intake.plan.StudyPlan.of_study`.
        options: how to run it (:class:`~study.search.context.RunOptions`: resume, Ray address, retries, ...;
            default its defaults).
        on_start: called once every input check passed, just before anything is written (the CLI warns there).

    Raises :class:`StudyError` subclasses for user errors before anything is written or started
    (:class:`StudyLockedError` when another driver runs the study).
    """
    options = RunOptions() if options is None else options
    plan = run if isinstance(run, StudyPlan) else StudyPlan.of_study(run)
    spec = plan.base
    layout = StudyLayout.for_spec(spec)
    check_tracking_env(spec)
    from trainables.checks import check_inputs
    from trainables.data import check_dataset

    # The driver downloads missing ImageNet weights (model.download; trials never do), after checking the data root.
    ensure_pretrained(spec.model, before_download=lambda: check_dataset(spec.dataset))
    check_inputs(spec)  # the data root and pretrained weights, before anything is written or Ray starts
    local = (options.address or os.environ.get("RAY_ADDRESS") or "local") == "local"
    if local:
        check_local_resources(spec)
    set_budget(spec.tracking.outage_budget_s)
    if not options.stores_checked:  # servers and buckets answer, before anything is written or Ray starts
        preflight_stores(layout, spec.name)
    quiet_store_failures()  # a full disk is one line from the CLI, not every library's traceback
    check_stop("before the study started")
    with study_lock(layout.root), library_log() as study_log:
        # With search.replicates {min, max} the stages start with the first round (the rounds stage adds the rest).
        context = StudyContext(spec, layout, options, check_resume(plan, layout, options.resume), plan.first_round)
        preload_in_background()
        started_ray = connect_ray(options.address)
        import ray

        # After a stop signal, Ray's GCS going away (Slurm signals every process of a job) ends the driver with 3.
        watch = RayLossWatch(ray.get_runtime_context().gcs_address).start() if stopping.is_installed() else None
        # The study's own Ray dying (a kill, the out-of-memory killer) ends the driver with 3 as well, at once.
        node = PrivateRayWatch.of_this_driver(watch.end) if watch is not None and started_ray else None
        try:
            check_storage_reachable(layout.root, options.shared_storage)
            unfit = check_cluster_resources(spec, ray.nodes(), local=local)
            if unfit is not None:
                print(f"warning: {unfit}; trials wait for an autoscaler up to --pending-timeout", file=sys.stderr)
        except SpecError:
            _shutdown_ray(started_ray, watch, node)
            raise
        return _run_validated(context, started_ray, on_start, study_log, (watch, node))


def _shutdown_ray(started_ray: bool, watch: RayLossWatch | None, node: PrivateRayWatch | None = None) -> None:
    """Shut down the Ray this driver started (the watches first: the GCS and raylet go away on purpose now)."""
    if node is not None:
        node.stop()
    if watch is not None:
        watch.disarm()
    if started_ray:
        shutdown_ray()


def _run_validated(
    context: StudyContext,
    started_ray: bool,
    on_start: Callable[[], None] | None,
    study_log: StudyLog,
    watches: tuple[RayLossWatch | None, PrivateRayWatch | None],
) -> StudyOutcome:
    """:func:`run_study` once every input check passed, under the study's lock, with Ray connected (``watches``: the
    driver's end when its Ray goes away, :class:`RayLossWatch`, and when its private Ray dies)."""
    watch, node = watches
    # Everything is validated: from here on we write.
    if on_start is not None:
        on_start()
    store, parent = _open_study(context, study_log)

    def killed() -> None:
        """A stop: the runs are KILLED (resumable), not FAILED."""
        store.close_orphans(parent, status="KILLED")
        store.end_parent(parent, "KILLED", {}, {})

    if watch is not None:
        watch.closing = killed
    try:
        outcome = _run_stages(context, store, parent)
    except StudyStopped:
        # A stop signal at a point where nothing is half-written.
        with contextlib.suppress(Exception):
            killed()
        raise
    except BaseException as e:
        if node is not None:
            node.check()  # an error of its private Ray's death (a call to the dead raylet): exit 3, not FAILED
        if watch is not None and caused_by_stop(e):
            # Ray ended with the driver's stop (or Ctrl-C came twice): what is saved is saved, and Ray may be gone,
            # so neither its shutdown nor Python's teardown (Ray's atexit hook) would return. Exit 3 now.
            watch.end(f"{type(e).__name__} during the stop")
        # The driver itself broke: no run may stay RUNNING. A store that broke (a full disk) cannot record that
        # either: the original error is the one to report, and --resume closes what stays RUNNING.
        with contextlib.suppress(Exception):
            store.close_orphans(parent, status="FAILED")
            store.end_parent(parent, "FAILED", {}, {})
        raise
    finally:
        _shutdown_ray(started_ray, watch, node)
    _close_study(context.spec, store, parent, outcome)
    return outcome


def _open_study(context: StudyContext, study_log: StudyLog) -> tuple[TrackingStore, str]:
    """The study's directory, log and spec file, and its MLflow experiment with the parent run (opened, or reopened
    on a resume: the runs a killed driver left RUNNING are closed)."""
    spec, layout = context.spec, context.layout
    layout.mkdir()
    study_log.attach(layout.log_file)
    if not context.resuming:
        write_bytes(layout.spec_file, yaml.safe_dump(redacted_spec(spec), sort_keys=False).encode())
    if context.plan.written and read_bytes(layout.table_file) is None:  # a table's spec as written, kept as started
        write_bytes(layout.table_file, written_text(context.plan))
    store = TrackingStore(layout.tracking_uri, spec.name, layout.artifact_location)
    parent = store.start_parent(
        run_name=spec.name,
        params=flatten(
            spec.model_dump(mode="json", include={"family", "search", "validation", "final", "resources", "storage"})
        ),
        tags={
            R.FAMILY: spec.family,
            R.DATASET: spec.dataset.name,
            R.STUDY_DIR: layout.root,
            R.SELECTION: selection_tag(spec),
            R.VALIDATION: spec.validation.kind,
            R.VAL_LABELS: spec.validation.labels,
            **numerics_tags(spec),  # what decides the numbers besides the spec (of the machine that started it)
        },
    )
    store.close_orphans(parent)  # runs a killed driver left RUNNING
    return store, parent


def _run_stages(context: StudyContext, store: TrackingStore, parent: str) -> StudyOutcome:
    """The plan's stages in run order (:func:`~study.search.stages.stages_of`), each from what the one before it left,
    until one does not go on: a stop (its outcome says where it stands), or a search whose every trial failed."""
    # A failed trial is ERROR in Ray's snapshots as it is in Optuna and MLflow: one whose actor died stayed RUNNING
    # there, and --resume ran it again after its cell had replaced it.
    snapshot_failed_trials()
    started = time.perf_counter()
    run = StageRun(context, store, parent)
    result: StageResult | None = None
    for stage in stages_of(context.plan):
        if result is not None and not result.goes_on:
            break
        result = stage.run(run, result)
    assert result is not None, "every plan runs its search"
    return dataclasses.replace(result.outcome, wall_time_s=time.perf_counter() - started)


def _close_study(spec: StudySpec, store: TrackingStore, parent: str, outcome: StudyOutcome) -> None:
    """The parent run's end: FINISHED with the best value, KILLED (a stop: ``--resume`` writes the result) or FAILED."""
    status = "FINISHED" if outcome.succeeded else ("KILLED" if outcome.interrupted else "FAILED")
    store.close_orphans(parent, status="KILLED")
    metrics = {"num_trials": float(outcome.num_trials), "num_failed": float(outcome.num_failed)}
    tags: dict[str, str] = {}
    if not outcome.interrupted:  # a stopped study's best so far is no result: --resume writes it
        if outcome.best_value is not None:
            metrics[R.best_metric(spec.search.objective)] = outcome.best_value
        tags[R.BEST_TRIAL_ID] = outcome.best_trial_id or ""
    if outcome.succeeded:
        tags[R.STAGE] = R.STAGE_DONE
    store.end_parent(parent, status, metrics, tags)


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

"""Tracking: the one door to the stores (MLflow and Optuna's database).

Only this package imports ``mlflow`` or opens an Optuna storage (``harness/layering.py`` fails CI otherwise): the
driver's writes, ``--status``, the dashboards and the Optuna↔MLflow link all go through it, and so every call rides
out a restart of its store (:mod:`study.tracking.outage`) on a pre-pinged pool. The face, after Optuna's
``storages/``:

- :mod:`study.tracking.stores`: ``mlflow_client``, ``optuna_storage``, ``load_optuna_study``, ``optuna_study_names``
  (readers and one-off writers);
- :mod:`study.tracking.store`: the study's experiment and parent run (``TrackingStore``);
- :mod:`study.tracking.callback`: the Ray Tune callback that writes the trial runs (imports Ray);
- :mod:`study.tracking.optuna_link`: Optuna trials linked to their MLflow runs, the order they were asked in;
- :mod:`study.tracking.peek`: read-only views for ``--status`` (no Ray, nothing created);
- :mod:`study.tracking.preflight`, :mod:`study.tracking.outage`, :mod:`study.tracking.guarded`,
  :mod:`study.tracking.credentials`: the stores checked before a study starts, outages ridden out, secrets kept off
  disk;
- :mod:`study.tracking.server`: a local ``mlflow server`` (its command line: :mod:`study.mlflow_server`).

``MlflowClient`` and ``Run`` are named here for type annotations elsewhere (``if TYPE_CHECKING:`` imports them from
this package, not from ``mlflow``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from study.runtime.face import face_of

if TYPE_CHECKING:
    from mlflow import MlflowClient as MlflowClient
    from mlflow.entities import Run as Run

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "DEFAULT_BUDGET_S": "study.tracking.outage",
    "GRACE_S": "study.tracking.reaper",
    "GuardedClient": "study.tracking.guarded",
    "GuardedRDBStorage": "study.tracking.guarded",
    "MASK": "study.tracking.credentials",
    "MAX_PARAM_LENGTH": "study.tracking.store",
    "MlflowServer": "study.tracking.server",
    "MlflowTrialCallback": "study.tracking.callback",
    "OptunaRunLink": "study.tracking.optuna_link",
    "OutageEscape": "study.tracking.outage",
    "OutageGuard": "study.tracking.outage",
    "RedactedRDBStorage": "study.tracking.credentials",
    "TrackingStore": "study.tracking.store",
    "check_database": "study.tracking.preflight",
    "check_env": "study.tracking.credentials",
    "check_storage_uri": "study.tracking.preflight",
    "check_tracking_env": "study.tracking.credentials",
    "check_tracking_server": "study.tracking.preflight",
    "connection_url": "study.tracking.credentials",
    "create_once": "study.tracking.guarded",
    "endpoint": "study.tracking.preflight",
    "error_line": "study.tracking.callback",
    "failures": "study.tracking.peek",
    "free_port": "study.tracking.server",
    "guard": "study.tracking.outage",
    "guarded_client": "study.tracking.guarded",
    "is_transient": "study.tracking.outage",
    "load_optuna_study": "study.tracking.stores",
    "log_params": "study.tracking.store",
    "main": "study.tracking.reaper",
    "mask_passwords": "study.tracking.credentials",
    "missing_sqlite": "study.tracking.peek",
    "mlflow_client": "study.tracking.stores",
    "mlflow_store_name": "study.tracking.guarded",
    "optuna_storage": "study.tracking.stores",
    "optuna_store_name": "study.tracking.guarded",
    "optuna_study_names": "study.tracking.stores",
    "param_value": "study.tracking.store",
    "parent_status": "study.tracking.peek",
    "parent_tags": "study.tracking.peek",
    "preflight_stores": "study.tracking.preflight",
    "preload_in_background": "study.tracking.store",
    "reap": "study.tracking.reaper",
    "redact": "study.tracking.credentials",
    "redacted_spec": "study.tracking.credentials",
    "remember": "study.tracking.credentials",
    "retrying": "study.tracking.outage",
    "runs_of": "study.tracking.peek",
    "serve": "study.tracking.server",
    "set_budget": "study.tracking.outage",
    "start_server": "study.tracking.server",
    "through_ray": "study.tracking.outage",
    "trial_numbers": "study.tracking.optuna_link",
    "unwrapped": "study.tracking.outage",
}
__getattr__, __dir__ = face_of(__name__, FACE)

__all__ = ["MlflowClient", "Run", *FACE]  # noqa: PLE0604

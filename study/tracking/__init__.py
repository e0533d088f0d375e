"""Tracking: the one door to the stores (MLflow and Optuna's database).

Only this package imports ``mlflow`` or opens an Optuna storage (``harness/layering.py`` fails CI otherwise): the
driver's writes, ``--status``, the dashboards and the Optuna↔MLflow link all go through it, and so every call rides
out a restart of its store (:mod:`study.tracking.outage`) on a pre-pinged pool. The face, after Optuna's
``storages/``:

- :mod:`study.tracking.doors`: ``mlflow_client``, ``optuna_storage``, ``load_optuna_study``, ``optuna_study_names``
  (readers and one-off writers);
- :mod:`study.tracking.store`: the study's experiment and parent run (``TrackingStore``);
- :mod:`study.tracking.callback`: the Ray Tune callback that writes the trial runs (imports Ray);
- :mod:`study.tracking.optuna_link`: Optuna trials linked to their MLflow runs, the order they were asked in;
- :mod:`study.tracking.peek`: read-only views for ``--status`` (no Ray, nothing created);
- :mod:`study.tracking.preflight`, :mod:`study.tracking.outage`, :mod:`study.tracking.guarded`,
  :mod:`study.tracking.credentials`: the stores checked before a study starts, outages ridden out, secrets kept off
  disk;
- :mod:`study.tracking.server`: a local ``mlflow server`` (its command line: :mod:`study.commands.mlflow_server`).

``MlflowClient`` and ``Run`` are named here for type annotations elsewhere (``if TYPE_CHECKING:`` imports them from
this package, not from ``mlflow``).

A map, not a face: callers import the module that holds a name (``from study.search.driver import run_study``);
the wing's ``__init__`` imports nothing, so importing one light module of the wing never imports its heavy ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow import MlflowClient as MlflowClient
    from mlflow.entities import Run as Run

__all__ = ["MlflowClient", "Run"]

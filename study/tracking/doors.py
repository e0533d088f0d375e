"""Opening the stores: every MLflow client and every Optuna storage the project uses outside a trial is made here.

A door that opens a store by itself (``MlflowClient(...)``, ``optuna.load_study(storage=url)``) has no outage guard
and no pre-pinged pool, so a database restart ends whatever uses it (the run link's own ``RDBStorage`` once did).
``harness/layering.py`` fails CI when a module outside :mod:`study.tracking` imports ``mlflow`` or opens an Optuna
storage, so these functions stay the only doors:

- :func:`mlflow_client`: an ``MlflowClient`` whose calls ride out an outage (:class:`~study.tracking.guarded.GuardedClient`);
- :func:`optuna_storage`: Optuna's RDB storage, guarded, on a pre-pinged pool, its URL redacted when pickled
  (:class:`~study.tracking.guarded.GuardedRDBStorage`);
- :func:`load_optuna_study` and :func:`optuna_study_names`: read a study (or a table's cell studies) through it.

URLs are the redacted forms the spec and layout hold; the real URL is resolved only for the connection
(:func:`study.tracking.credentials.connection_url`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from study.tracking.credentials import connection_url
from study.tracking.guarded import GuardedRDBStorage, guarded_client

if TYPE_CHECKING:
    import optuna
    from mlflow import MlflowClient

__all__ = ["mlflow_client", "optuna_storage", "load_optuna_study", "optuna_study_names"]


def mlflow_client(uri: str) -> MlflowClient:
    """A guarded client of the MLflow store at ``uri`` (a redacted tracking URI, or one without a secret)."""
    from mlflow import MlflowClient

    # ``uri`` is the redacted form (safe to keep and pickle); the real one exists only for the connection.
    return guarded_client(MlflowClient(tracking_uri=connection_url(uri)), uri)


def optuna_storage(url: str, key: str = "tracking.optuna_uri") -> GuardedRDBStorage:
    """The guarded Optuna storage at ``url``; ``key`` names the spec key in a URL error."""
    return GuardedRDBStorage(url, key)


def _storage(storage: str | GuardedRDBStorage) -> GuardedRDBStorage:
    return optuna_storage(storage) if isinstance(storage, str) else storage


def optuna_study_names(storage: str | GuardedRDBStorage, study_name: str) -> list[str]:
    """The Optuna studies of study ``study_name``: its own, or a table's cells (``<name>.<arm>.<cell>``)."""
    names = [s.study_name for s in _storage(storage).get_all_studies()]
    return [n for n in names if n == study_name or n.startswith(study_name + ".")]


def load_optuna_study(name: str, storage: str | GuardedRDBStorage, **kwargs: Any) -> optuna.Study:
    """Optuna's ``load_study`` on the guarded storage (quiet: Optuna's INFO lines are not the reader's)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=_storage(storage), **kwargs)

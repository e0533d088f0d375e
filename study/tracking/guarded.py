"""The driver's store clients with every call guarded through outages (:mod:`study.tracking.outage`).

- :class:`GuardedRDBStorage`: Optuna's RDB storage (redacted URL, :class:`~study.tracking.credentials.RedactedRDBStorage`)
  whose every storage call is retried through an outage. This is the seam for Ray Tune's ``OptunaSearch``: Ray calls
  the searcher in the driver, and the searcher's Optuna study calls this storage (through Optuna's ``_CachedStorage``,
  which calls the public methods and the few private ones listed in :data:`study.runtime.compat.RDB_PRIVATE_CALLS`), so a PostgreSQL restart no longer ends the
  study at ``set_trial_intermediate_value``. Its engine pre-pings pooled connections, so the first call after a
  restart takes a fresh connection instead of failing on a dead one.
- :class:`GuardedClient`: an ``MlflowClient`` proxy whose method calls are retried the same way (used by
  :class:`~study.tracking.store.TrackingStore` and the trial callback). MLflow's own HTTP retries are set to 0 in the
  driver (unless the user set ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``) so that an outage is seen, reported and bounded here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from optuna.storages import BaseStorage

from study.runtime.compat import RDB_PRIVATE_CALLS
from study.tracking.credentials import RedactedRDBStorage
from study.tracking.outage import guard, retrying

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = ["GuardedRDBStorage", "GuardedClient", "guarded_client", "optuna_store_name", "mlflow_store_name"]

_LOCAL_ONLY = {"get_heartbeat_interval", "get_heartbeat_stale_trial_callback", "remove_session"}


def optuna_store_name(redacted_url: str) -> str:
    return f"the Optuna store {redacted_url}"


def mlflow_store_name(redacted_uri: str) -> str:
    return f"the MLflow store {redacted_uri}"


class GuardedRDBStorage(RedactedRDBStorage):
    """Optuna's RDB storage that rides out outages of its database (see the module docstring)."""

    def __init__(self, url: str, key: str = "tracking.optuna_uri", **kwargs: Any) -> None:
        engine_kwargs = {"pool_pre_ping": True, **kwargs.pop("engine_kwargs", {})}
        super().__init__(url, key, engine_kwargs=engine_kwargs, **kwargs)


def _guard_methods(cls: type) -> None:
    names = [n for n in vars(BaseStorage) if not n.startswith("_") and n not in _LOCAL_ONLY] + list(RDB_PRIVATE_CALLS)
    for name in names:
        original = getattr(cls, name, None)
        if not callable(original):
            continue

        def method(self: GuardedRDBStorage, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            return guard(optuna_store_name(self._redacted_url)).call(_original, self, *args, **kwargs)

        method.__name__ = name
        method.__doc__ = original.__doc__
        setattr(cls, name, method)


_guard_methods(GuardedRDBStorage)


class GuardedClient:
    """An ``MlflowClient`` whose method calls ride out outages of its tracking store."""

    def __init__(self, client: Any, redacted_uri: str) -> None:
        self._client = client
        self._store = mlflow_store_name(redacted_uri)
        if redacted_uri.startswith(("http://", "https://")):
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._client, name)
        return retrying(self._store, value) if callable(value) and not name.startswith("_") else value


def guarded_client(client: MlflowClient, redacted_uri: str) -> MlflowClient:
    """``client`` behind a :class:`GuardedClient`, typed as the client it stands for."""
    return cast("MlflowClient", GuardedClient(client, redacted_uri))

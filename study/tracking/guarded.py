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

Exactly once. A write whose commit reached the server but whose answer was lost (the server crashed, the connection
dropped) fails on the client as an outage, and a blind retry would write it twice. Writes that only set a value
(intermediate values, attributes, tags, params, metrics with their timestamp) are naturally idempotent; the ones that
create or finish something reconcile before a retry (:func:`create_once`): a new Optuna trial is the one a retry finds
beyond the count it started from (the driver is its studies' single writer), a state already set is not set again, an
MLflow run is found by its Ray trial id (the trial callback), an experiment by its name, a parent run by its role.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from optuna.storages import BaseStorage, RDBStorage

from study.runtime.compat import RDB_PRIVATE_CALLS
from study.tracking.credentials import RedactedRDBStorage
from study.tracking.outage import guard, retrying

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "GuardedRDBStorage",
    "GuardedClient",
    "guarded_client",
    "create_once",
    "optuna_store_name",
    "mlflow_store_name",
]

T = TypeVar("T")

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

    def _store(self) -> str:
        return optuna_store_name(self._redacted_url)

    def create_new_trial(self, study_id: int, template_trial: Any = None) -> int:
        return self._create_new_trial(study_id, template_trial)._trial_id

    def _create_new_trial(self, study_id: int, template_trial: Any = None) -> Any:
        """A new trial (Optuna's cache calls this private method), created once: a retry after a lost answer returns
        the trial the lost commit created, the first beyond the count the call started from."""
        before = self.get_n_trials(study_id)

        def created() -> Any:
            trials = RDBStorage.get_all_trials(self, study_id, deepcopy=False)
            return next((t for t in trials if t.number >= before), None)

        return create_once(self._store(), lambda: RDBStorage._create_new_trial(self, study_id, template_trial), created)

    def set_trial_state_values(self, trial_id: int, state: Any, values: Any = None) -> bool:
        """Finish (or start) a trial once: a retry after a lost answer finds the state already set."""

        def already() -> bool | None:
            return True if RDBStorage.get_trial(self, trial_id).state == state else None

        return create_once(
            self._store(), lambda: RDBStorage.set_trial_state_values(self, trial_id, state, values), already
        )


def _guard_methods(cls: type) -> None:
    names = [n for n in vars(BaseStorage) if not n.startswith("_") and n not in _LOCAL_ONLY] + list(RDB_PRIVATE_CALLS)
    for name in names:
        original = getattr(cls, name, None)
        if not callable(original) or name in vars(cls):  # the class's own methods reconcile their retries
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


def create_once(store: str, create: Callable[[], T], find: Callable[[], T | None]) -> T:
    """``create()`` through ``store``'s outage guard, exactly once: before each retry ``find()`` looks for what a
    previous attempt may have committed before its answer was lost, and returns it instead of creating it again."""
    attempts = 0

    def attempt() -> T:
        nonlocal attempts
        if attempts:
            found = find()
            if found is not None:
                return found
        attempts += 1
        return create()

    return guard(store).call(attempt)


def guarded_client(client: MlflowClient, redacted_uri: str) -> MlflowClient:
    """``client`` behind a :class:`GuardedClient`, typed as the client it stands for."""
    return cast("MlflowClient", GuardedClient(client, redacted_uri))

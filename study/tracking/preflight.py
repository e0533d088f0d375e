"""Pre-flight of a study's stores on servers, before anything is written or Ray starts.

Left to the libraries, a store that cannot be used surfaces only once the study has begun: Ray is up, ``spec.yaml`` and
``mlflow.db`` are written (so the same command then refuses as "already exists"), and the error is a chain of
tracebacks. So the driver tries each store the way the study will use it, first:

- the Optuna URL (``tracking.optuna_uri``, a database server): its driver imports, the server answers, the login is
  accepted, the database exists, Optuna's tables can be created and its studies read;
- the MLflow tracking URI (``tracking.uri``): a server answers ``/health`` and the study's experiment can be found or
  created; a database URI gets the Optuna URL's checks;
- the storage URI (``storage: s3://…``): a probe object is written and deleted.

Each failure is a :class:`~trainables.schema.errors.SpecError` naming the spec key, the redacted URL (host and port, no
password) and the fix: exit 2, one line. sqlite stores and local storage are left to the existing checks (they are
created by the study itself; :mod:`study.runtime.lock` checks that the storage can be written). Nothing here is specific to
one server's library beyond the messages it reads; SQLAlchemy, MLflow's client and pyarrow do the talking.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Any

from study.tracking.credentials import connection_url, mask_passwords, redact
from study.tracking.schema_lock import creating_optuna_schema
from trainables.schema.errors import SpecError

__all__ = ["preflight_stores", "check_database", "check_tracking_server", "check_storage_uri", "endpoint"]

#: The DBAPI module SQLAlchemy 2 loads for each database scheme, and the extra that installs it.
_DRIVERS = {
    "postgresql": ("psycopg", 'pip install -e ".[postgres]"'),
    "mysql": ("MySQLdb", "pip install mysqlclient"),
    "mssql": ("pyodbc", "pip install pyodbc"),
}
_TIMEOUT_S = 10


def endpoint(url: str) -> str:
    """``host:port`` of a server URL (the scheme's default port when it names none)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    defaults = {"postgresql": 5432, "mysql": 3306, "mssql": 1433, "http": 80, "https": 443}
    scheme = parts.scheme.split("+")[0]
    try:
        port = parts.port or defaults.get(scheme)
    except ValueError:
        port = None
    return f"{parts.hostname or '?'}:{port}" if port else (parts.hostname or "?")


def _why(e: BaseException) -> str:
    """The driver's own words for a failure: its first line, without SQLAlchemy's boilerplate, any URL's password
    masked (before it is cut to 300 characters, so that no cut leaves a part of one)."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    return mask_passwords(re.sub(r"^\(\S+\)\s*", "", line).strip())[:300]


def check_database(redacted: str, key: str) -> Any:
    """Connect to the database ``redacted`` names (its real URL from :func:`connection_url`) and return an engine.

    Raises :class:`SpecError` (``key``) when the driver is missing, the server does not answer, the login is refused
    or the database does not exist.
    """
    import sqlalchemy
    from sqlalchemy.engine import make_url

    real = connection_url(redacted, key)
    try:
        url = make_url(real)
    except (sqlalchemy.exc.ArgumentError, ValueError):  # their text may quote a part of the URL: a password's
        raise SpecError(f"{redacted} is not a database URL SQLAlchemy can read", key=key) from None
    scheme = url.get_backend_name()
    where = endpoint(redacted)
    connect_args = {"connect_timeout": _TIMEOUT_S} if scheme == "postgresql" else {}
    try:
        engine = sqlalchemy.create_engine(real, connect_args=connect_args, pool_pre_ping=True)
    except ImportError as e:
        module, fix = _DRIVERS.get(scheme, (getattr(e, "name", None) or "its driver", "install it"))
        raise SpecError(
            f"{redacted} needs the database driver {module}, which is not installed: {fix}", key=key
        ) from None
    except sqlalchemy.exc.ArgumentError as e:  # an unknown dialect or argument: SQLAlchemy names it, not the URL
        raise SpecError(f"{redacted} cannot be opened ({_why(e)})", key=key) from None
    try:
        with engine.connect() as con:
            con.execute(sqlalchemy.text("SELECT 1"))
    except sqlalchemy.exc.DBAPIError as e:
        engine.dispose()
        raise SpecError(_connect_failure(_why(e), redacted, where, url), key=key) from None
    return engine


def _connect_failure(why: str, redacted: str, where: str, url: Any) -> str:
    low = why.lower()
    if "password authentication failed" in low or "access denied" in low or "no password supplied" in low:
        return (
            f"the database server at {where} refused the login of user {url.username!r} ({why}) for {redacted}: "
            "fix the user or password (the URL's ${VAR}, PGPASSWORD or ~/.pgpass)"
        )
    if "does not exist" in low and "database" in low or "unknown database" in low:
        return (
            f"database {url.database!r} does not exist on the server at {where} ({redacted}): create it "
            f"(createdb -h {url.host} -p {url.port or 5432} -U {url.username} {url.database}, or CREATE DATABASE "
            f"{url.database}) or fix the URL"
        )
    return f"cannot reach the database server at {where} ({why}) for {redacted}: start it, or fix the host and port"


def check_optuna(redacted: str, key: str = "tracking.optuna_uri") -> None:
    """The Optuna URL: the database checks, then Optuna's tables created (if new) and its studies read."""
    from optuna.storages import RDBStorage

    engine = check_database(redacted, key)
    engine.dispose()
    try:
        real = connection_url(redacted, key)
        with creating_optuna_schema(real):
            storage = RDBStorage(real, engine_kwargs={"pool_pre_ping": True})
        storage.get_all_studies()
        storage.engine.dispose()
    except Exception as e:  # noqa: BLE001 - a permission or schema error: the one line says which
        raise SpecError(
            f"Optuna cannot create or read its tables in {redacted} ({_why(e.__cause__ or e)}): grant the user "
            "CREATE and read/write on the database, or point the URL at a database it owns",
            key=key,
        ) from None


def check_tracking_server(redacted: str, experiment: str, key: str = "tracking.uri") -> None:
    """An ``http(s)://`` tracking URI: the server answers ``/health``, the experiment is found or created."""
    import requests

    where = endpoint(redacted)
    real = connection_url(redacted, key).rstrip("/")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    auth = (user, password) if user and password else None
    try:
        answer = requests.get(f"{real}/health", timeout=_TIMEOUT_S, auth=auth)
    except requests.RequestException as e:
        reason = "connection refused" if "refused" in str(e).lower() else type(e).__name__
        raise SpecError(
            f"cannot reach the MLflow tracking server at {where} ({reason}) for {redacted}: start it "
            "(mlflow server --backend-store-uri … --host … --port …), or fix the URI",
            key=key,
        ) from None
    if answer.status_code in (401, 403):
        raise SpecError(
            f"the MLflow tracking server at {where} refused this driver (HTTP {answer.status_code}): set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
            key=key,
        )
    if answer.status_code != 200:
        raise SpecError(
            f"{redacted} at {where} does not answer as an MLflow tracking server (/health: HTTP {answer.status_code})",
            key=key,
        )
    _find_or_create_experiment(redacted, experiment, key, where)


def _find_or_create_experiment(redacted: str, experiment: str, key: str, where: str) -> None:
    from mlflow import MlflowClient

    saved = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"  # the server answered /health: no minute of retries here
    try:
        client = MlflowClient(tracking_uri=connection_url(redacted, key))
        if client.get_experiment_by_name(experiment) is None:
            client.create_experiment(experiment)
    except Exception as e:  # noqa: BLE001 - MLflow's error names the cause; the line adds the key and the fix
        raise SpecError(
            f"the MLflow store at {where} cannot find or create experiment {experiment!r} ({_why(e)}): check the "
            "server's backend store and this user's permissions",
            key=key,
        ) from None
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)
        else:
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = saved


def check_storage_uri(root: str, key: str = "storage") -> None:
    """Write a probe object under ``root`` (a pyarrow filesystem URI) and delete it again, directory markers too."""
    import pyarrow.fs

    scheme = root.split("://", 1)[0]
    endpoint_url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    where = redact(endpoint_url) if endpoint_url else f"the {scheme} service"  # (an endpoint may carry user:pw@)
    try:
        fs, inner = pyarrow.fs.FileSystem.from_uri(root)
    except (OSError, ValueError) as e:
        raise SpecError(f"{root} cannot be opened ({_why(e)})", key=key) from None
    bucket = inner.split("/", 1)[0]
    # pyarrow keeps a "directory" alive with an empty marker object when its last file is deleted: note which
    # prefixes exist before the probe, so the ones the probe created can be removed afterwards.
    parts = inner.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(2, len(parts) + 1)]
    try:
        existed = {p for p in prefixes if fs.get_file_info(p).type != pyarrow.fs.FileType.NotFound}
        probe = f"{inner}/.dmlstudy-probe-{secrets.token_hex(6)}"
        with fs.open_output_stream(probe) as f:
            f.write(b"probe")
        fs.delete_file(probe)
        for prefix in reversed(prefixes):
            if prefix not in existed and fs.get_file_info(prefix).type == pyarrow.fs.FileType.Directory:
                fs.delete_dir(prefix)
    except OSError as e:
        why = _why(e)
        if "NO_SUCH_BUCKET" in why or "does not exist" in why.lower() and "bucket" in why.lower():
            raise SpecError(
                f"the bucket {bucket!r} of {root} does not exist at {where}: create it (aws s3 mb s3://{bucket}), or "
                "fix storage",
                key=key,
            ) from None
        if "NETWORK_CONNECTION" in why or "Could not connect" in why:
            raise SpecError(
                f"cannot reach the object store at {where} for {root} ({why.split(';')[-1].strip()}): start it, or "
                "fix AWS_ENDPOINT_URL",
                key=key,
            ) from None
        if "ACCESS_DENIED" in why or "AccessDenied" in why:
            why = "access denied"
        raise SpecError(
            f"{root} cannot be written at {where} ({why}): grant these credentials write access to the bucket, or "
            "fix storage / the AWS_* credentials",
            key=key,
        ) from None


def preflight_stores(layout: Any, experiment: str) -> None:
    """Every store on a server, tried before the study writes anything or starts Ray (see the module docstring).

    The MLflow experiment is created last, once everything else passed: a study refused here leaves nothing behind
    but, at most, an empty experiment it will reuse.
    """
    if not layout.optuna_url.startswith("sqlite:"):
        check_optuna(layout.optuna_url)
    if layout.remote:
        check_storage_uri(layout.root)
    uri = layout.tracking_uri
    if uri.startswith(("http://", "https://")):
        check_tracking_server(uri, experiment)
    elif uri.split(":", 1)[0].split("+")[0] in _DRIVERS:
        check_database(uri, "tracking.uri").dispose()

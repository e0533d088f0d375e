"""Database and tracking URLs without their secrets on disk.

A spec's ``tracking.uri`` and ``tracking.optuna_uri`` may carry a password (``postgresql://u:pw@host/db``) or
name environment variables (``postgresql://u:${OPTUNA_DB_PASSWORD}@host/db``, resolved only here, when a
connection is made; libpq's ``PGPASSWORD`` and MLflow's ``MLFLOW_TRACKING_PASSWORD`` work too, with no password
in the URL at all). Everything the study writes or prints — ``spec.yaml``, Ray's experiment state, the pickled
searcher and callbacks, MLflow, the console — holds the *redacted* form (``u:***@host``). The driver process
remembers which real URL each redacted form stands for (:func:`remember`), and connections go through
:func:`connection_url`; a pickled Optuna storage reconnects the same way when a resumed driver unpickles it
(:class:`RedactedRDBStorage`), since the process that restores it has loaded the same spec.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from optuna.storages import RDBStorage

from trainables.schema.errors import SpecError

if TYPE_CHECKING:
    from trainables.schema.spec import StudySpec

__all__ = [
    "redact",
    "remember",
    "connection_url",
    "check_env",
    "check_tracking_env",
    "redacted_spec",
    "RedactedRDBStorage",
    "MASK",
    "mask_passwords",
]

MASK = "***"
_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: ``scheme://user:PASSWORD@`` (the password may hold anything but ``@`` and ``/``).
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)([^/@]*)(@)")
#: ``?password=VALUE`` / ``&token=VALUE`` style query values.
_QUERY_SECRET = re.compile(
    r"([?&](?:password|passwd|pwd|pass|token|secret|access_token|api_key)=)([^&#]*)(&|#|$)", re.IGNORECASE
)
#: ``scheme://user:password@`` anywhere in a text: the password of a URL quoted in a message.
_TEXT_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^@\s]*@")
#: redacted URL → the URL as the spec wrote it (may still name ``${VAR}``s); this driver process only.
_REAL: dict[str, str] = {}


def redact(url: str) -> str:
    """``url`` with a literal password (userinfo or a ``password=`` style query value) replaced by ``***``.

    ``${VAR}`` references are not secrets and stay as written, so a redacted URL still says where the secret
    comes from. Everything else is kept byte for byte (``sqlite:////abs/path`` stays as it is).
    """

    def mask(match: re.Match[str]) -> str:
        secret = match.group(2)
        return match.group(0) if _ENV_VAR.fullmatch(secret) else match.group(1) + MASK + match.group(3)

    url = _USERINFO_PASSWORD.sub(mask, url, count=1)
    return _QUERY_SECRET.sub(mask, url)


def mask_passwords(text: str) -> str:
    """``text`` (an error message, a library's log line) with every URL's password replaced by ``***``."""
    return _TEXT_URL_PASSWORD.sub(rf"\1:{MASK}@", text)


def remember(url: str) -> str:
    """Return the redacted form of ``url`` and remember, in this process, which URL it stands for."""
    if url in _REAL:  # already a redacted form this process knows: keep what it stands for
        return url
    key = redact(url)
    _REAL[key] = url
    return key


def _expand(url: str, key: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise SpecError(f"environment variable {name} is not set (the URL names ${{{name}}})", key=key)
        return os.environ[name]

    return _ENV_VAR.sub(value, url)


def connection_url(url: str, key: str = "tracking.uri") -> str:
    """The URL to connect with: the real URL behind a redacted one, with ``${VAR}``s resolved from the
    environment. Never log or store what this returns. ``key`` names the spec key in errors."""
    real = _REAL.get(url)
    if real is None:
        if redact(url) != url or MASK not in url:
            real = url  # a URL the spec wrote (e.g. the default sqlite store), not a redacted one
        else:
            raise SpecError(f"{url} is redacted and this process does not know the real URL", key=key)
    return _expand(real, key)


def check_env(url: str | None, key: str) -> None:
    """Refuse, before anything starts, a URL naming an environment variable that is not set."""
    if url is not None:
        _expand(_REAL.get(url, url), key)


def redacted_spec(spec: StudySpec) -> dict[str, Any]:
    """The spec as JSON-ready data with its tracking URLs redacted: what ``spec.yaml`` records and resume compares."""
    data = spec.model_dump(mode="json")
    for key in ("uri", "optuna_uri"):
        if data["tracking"][key] is not None:
            data["tracking"][key] = redact(data["tracking"][key])
    return data


def check_tracking_env(spec: StudySpec) -> None:
    """Every ``${VAR}`` the tracking URLs name is set (checked on the driver before anything starts)."""
    check_env(spec.tracking.uri, "tracking.uri")
    check_env(spec.tracking.optuna_uri, "tracking.optuna_uri")


class RedactedRDBStorage(RDBStorage):
    """Optuna's RDB storage that pickles its redacted URL, not the real one.

    Ray pickles the searcher (and the Optuna study and trials it holds, each referencing the storage) into the
    study's experiment state. ``RDBStorage`` already drops its engine when pickled but keeps its URL; this one
    keeps the redacted URL and reconnects through :func:`connection_url` when unpickled.
    """

    def __init__(self, url: str, key: str = "tracking.optuna_uri", **kwargs: Any) -> None:
        self._redacted_url = remember(url)
        super().__init__(connection_url(self._redacted_url, key), **kwargs)

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["url"] = self._redacted_url
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        state = dict(state)
        state["url"] = connection_url(state["_redacted_url"], "tracking.optuna_uri")
        super().__setstate__(state)

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
#: The query keys whose values are secrets (``?password=VALUE``, ``&token=VALUE``), in a URL and in a message.
_SECRET_KEYS = (
    r"(?:password|passwd|pwd|pass|sslpassword|token|access_token|session_token|secret|secret_key"
    r"|secret_access_key|api_key)"
)
#: ``scheme://user:PASSWORD@host``. The userinfo ends at the LAST ``@`` of the URL (the host and everything after it
#: hold none), so a password holding a raw ``/``, ``?``, ``#``, ``:`` or ``@`` is masked whole, however a parser
#: would split it; an ``@`` in a path or query masks more than the password, never less. A URL with no authority
#: (``sqlite:////abs/path``: ``/`` right after ``://``) has no userinfo.
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://(?:[^:/][^:]*)?:)(.*)(@)(?=[^@]*$)", re.DOTALL)
_QUERY_SECRET = re.compile(rf"([?&]{_SECRET_KEYS}=)([^&#]*)(&|#|$)", re.IGNORECASE)
#: ``scheme://user:PASSWORD@`` anywhere in a text (a URL quoted in a message ends at white space): the password runs
#: to the last ``@`` of the URL, as in :data:`_USERINFO_PASSWORD`.
_TEXT_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://(?:[^\s:/][^\s:]*)?):\S*@")
#: ``?password=VALUE`` / ``&token=VALUE`` anywhere in a text: the value runs to the next ``&``, ``#`` or white space.
_TEXT_QUERY_SECRET = re.compile(rf"([?&]{_SECRET_KEYS}=)[^&#\s]*", re.IGNORECASE)
#: Pieces of a known password at least this long are masked wherever a message holds them (shorter ones would mask
#: ordinary words).
_MIN_SECRET = 4
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
    """``text`` (an error message, a library's log line) with every URL's password and ``password=``-style query
    value replaced by ``***``, and every password of a URL this process remembers (:func:`remember`: the spec's
    tracking URLs) masked wherever it appears, whole or in pieces split at ``/ ? # : @``, as written and
    percent-decoded: a driver's message may quote a host that a raw ``@`` in the password made up."""
    text = _TEXT_URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    text = _TEXT_QUERY_SECRET.sub(rf"\1{MASK}", text)
    for secret in sorted(_known_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def _known_secrets() -> set[str]:
    """The passwords of the URLs this process remembers (and of the ``${VAR}``s they name), with their pieces."""
    from urllib.parse import unquote

    found: set[str] = set()
    for url in _REAL.values():
        values = [m.group(2) for m in (_USERINFO_PASSWORD.match(url),) if m]
        values += [m.group(2) for m in _QUERY_SECRET.finditer(url)]
        for value in values:
            names = _ENV_VAR.findall(value)
            for raw in [value, *(os.environ.get(name, "") for name in names)]:
                for form in (raw, unquote(raw)):
                    found.update(p for p in [form, *re.split(r"[/?#:@\s]+", form)] if len(p) >= _MIN_SECRET)
    return {s for s in found if not _ENV_VAR.fullmatch(s) and s != MASK}


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

"""Where a study runs and records: its diagnostics, a trial's resources and the tracking stores' URLs, checked
without quoting a secret (re-exported by :mod:`trainables.schema.spec`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import (
    Field,
    field_validator,
)

from trainables.schema._strict import _Strict


class DiagnosticsSpec(_Strict):
    """Label-free noise detectors (ξ, class centres, kNN; trainables/families/noise_detectors.py) scored against the
    recorded noise every ``every`` epochs (``noise/<detector>_auroc``, ``noise/<detector>_ap``); 0 turns them off.
    Only runs whose training labels carry noise are scored. Cost per scored epoch: one embedding pass of the
    training set (shared with a family that embeds it in that epoch) plus O(N²·D) similarities."""

    every: int = Field(1, ge=0)


class ResourcesSpec(_Strict):
    """One trial's Ray resources. A trial is one bundle, placed on one node, so it cannot ask for more than a node
    has; the bounds only refuse values no node has (Ray would wait for them forever)."""

    cpu: float = Field(1.0, gt=0, le=4096)
    gpu: float = Field(0.0, ge=0, le=64)


#: URL schemes (before any ``+driver``) of an MLflow tracking URI and of an Optuna RDB URL (SQLAlchemy).
_TRACKING_SCHEMES = ("http", "https", "databricks", "file", "sqlite", "postgresql", "mysql", "mssql")
_RDB_SCHEMES = ("sqlite", "postgresql", "mysql", "mariadb", "mssql", "oracle")
#: Schemes whose URL has no host: a file path (``sqlite:////abs/path.db``) or a profile (``databricks``).
_HOSTLESS_SCHEMES = ("sqlite", "file", "databricks")


#: What urllib's own URL errors may say here: its port error quotes the text it read as a port, which may be part
#: of a password, so only these are passed on.
_URL_ERRORS = {"Port out of range 0-65535": "its port is out of range 0-65535", "Invalid IPv6 URL": "invalid IPv6 host"}


def _userinfo(url: str) -> str | None:
    """The userinfo of ``url`` (``user:password``): what lies between ``://`` and the URL's LAST ``@``, the rule
    :func:`study.tracking.credentials.redact` masks by; ``None`` when there is no ``@`` or no authority."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    if "@" not in rest or rest.startswith("/"):
        return None
    return rest.rpartition("@")[0]


def _check_url(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """A URL with a known scheme, a host where it needs one, and a numeric port. The message never quotes the
    URL nor any part of it: it may hold a password.

    A password must percent-encode ``/ ? # @`` (``%2F %3F %23 %40``): left raw, urllib, SQLAlchemy and libpq each
    split the URL at another place (SQLAlchemy takes ``u:a@b@h`` as the password ``a`` on the host ``b@h``), so the
    host the checks name, the host the driver connects to and the part of the URL that is masked would differ."""
    if url is None or url == "databricks" and "databricks" in schemes:
        return url
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("is not a valid URL: it holds white space or a control character (percent-encode it)")
    userinfo = _userinfo(url)
    if userinfo is not None and any(c in userinfo for c in "/?#@"):
        raise ValueError(
            "is not a valid URL: the user or password before its host holds a raw '/', '?', '#' or '@' (percent-"
            "encode them in a password: %2F, %3F, %23, %40), or its path or query holds an '@' (write %40)"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check (ValueError when it is not a number)
    except ValueError as e:
        why = "its port is not a number" if str(e).startswith("Port could not be cast") else None
        raise ValueError(f"is not a valid URL ({why or _URL_ERRORS.get(str(e), 'it cannot be parsed')})") from None
    base = parts.scheme.split("+")[0].lower()
    if base not in schemes or "://" not in url:
        got = f"scheme {parts.scheme!r}" if parts.scheme and "://" in url else "no scheme://"
        raise ValueError(f"must be a URL with one of the schemes {', '.join(schemes)} (got {got})")
    if base not in _HOSTLESS_SCHEMES and not parts.hostname:
        raise ValueError(f"a {base}:// URL needs a host")
    if base in ("sqlite", "file") and parts.path in ("", "/"):
        raise ValueError(f"a {base}:// URL needs a file path (e.g. {base}:////abs/path)")
    return url


class TrackingSpec(_Strict):
    #: ``null`` → a sqlite store inside the study's storage directory; else e.g. ``http://host:5000``.
    uri: str | None = None
    #: Optuna RDB URL (``sqlite:///…``, ``postgresql://…``); ``null`` → ``optuna.db`` in the study directory.
    #: Required, like ``uri``, when ``storage`` is an ``s3://``/``gs://`` URI (sqlite needs a POSIX file).
    optuna_uri: str | None = None
    #: How long the driver rides out an outage of a store (a database restart or failover, a tracking server
    #: restart) before the study ends with exit 1 (resumable); see study/tracking/outage.py. Not part of a study's identity:
    #: ``--resume`` accepts a changed value.
    outage_budget_s: float = Field(default=300.0, ge=0)

    @field_validator("uri")
    @classmethod
    def _tracking_url(cls, url: str | None) -> str | None:
        return _check_url(url, _TRACKING_SCHEMES)

    @field_validator("optuna_uri")
    @classmethod
    def _rdb_url(cls, url: str | None) -> str | None:
        return _check_url(url, _RDB_SCHEMES)

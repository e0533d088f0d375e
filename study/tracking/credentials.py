"""Database and tracking URLs without their secrets on disk.

A spec's ``tracking.uri`` and ``tracking.optuna_uri`` may carry a password (``postgresql://u:pw@host/db``) or
name environment variables (``postgresql://u:${OPTUNA_DB_PASSWORD}@host/db``, resolved only here, when a
connection is made; libpq's ``PGPASSWORD`` and MLflow's ``MLFLOW_TRACKING_PASSWORD`` work too, with no password
in the URL at all). Everything the study writes or prints — ``spec.yaml``, Ray's experiment state, the pickled
searcher and callbacks, MLflow, the console — holds the *redacted* form (``u:***@host``). The driver process
remembers which real URL each redacted form stands for (:func:`remember`), and connections go through
:func:`connection_url`; a pickled Optuna storage reconnects the same way when a resumed driver unpickles it
(:class:`RedactedRDBStorage`), since the process that restores it has loaded the same spec.

A secret is found by what it means to the driver, not by how it is spelled: SQLAlchemy percent-decodes a query's
keys, so ``?passw%6Frd=`` is ``?password=`` and is masked as one (:func:`secret_key`), and what ``make_url`` and
``urllib`` read as a password is refused where a URL must hold none (:func:`written_secrets`).

Two strengths of masking. A message or a log line (:func:`mask_passwords`) may quote a fragment of a secret in a
library's words, so it masks every URL's secrets and every piece of a known password wherever it appears. A command
printed for a person to paste (a continue line, a ``kubectl`` line, :func:`shell_command`) must run as written, so it
masks each secret where it stands (a URL's password, a secret query key's value) and nothing else: with
``postgresql://study:study@localhost/study``, ``python -m study.run`` and ``storage=/srv/study/runs`` stay as they are.
It masks each argument, then quotes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

from optuna.storages import RDBStorage

from study.tracking.schema_lock import creating_optuna_schema
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
    "mask_argument",
    "shell_command",
    "secret_key",
    "written_secrets",
]

MASK = "***"
_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The query keys whose values are secrets (``?password=VALUE``, ``&token=VALUE``), in a URL and in a message, as a
#: driver reads the key: percent-decoded (:func:`secret_key`).
_SECRET_KEY = re.compile(
    r"password|passwd|pwd|pass|sslpassword|token|access_token|session_token|secret|secret_key|secret_access_key|api_key",
    re.IGNORECASE,
)
#: Rounds of percent-decoding a key is read through: SQLAlchemy decodes once, but a key encoded twice is masked too.
_DECODE_ROUNDS = 4
#: ``scheme://user:PASSWORD@host``. The userinfo ends at the LAST ``@`` of the URL (the host and everything after it
#: hold none), so a password holding a raw ``/``, ``?``, ``#``, ``:`` or ``@`` is masked whole, however a parser
#: would split it; an ``@`` in a path or query masks more than the password, never less. A URL with no authority
#: (``sqlite:////abs/path``: ``/`` right after ``://``) has no userinfo.
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://(?:[^:/][^:]*)?:)(.*)(@)(?=[^@]*$)", re.DOTALL)
#: ``scheme://user%3APASSWORD@host``: a ``:`` percent-encoded (once or more) reads as a user name holding it to
#: SQLAlchemy and libpq, but as a password to a person or a tool that decodes first: masked after it, all the same.
_USERINFO_ENCODED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@]*?%(?:25)*3[Aa])([^:]*)(@)(?=[^@]*$)", re.DOTALL)
#: A ``?key=value`` / ``&key=value`` pair of a URL: the value runs to the next ``&`` (SQLAlchemy's query runs to the
#: URL's end, ``#`` included, and ``parse_qsl`` splits it at ``&`` alone).
_QUERY_PAIR = re.compile(r"[?&]([^=&?]*)=([^&]*)")
#: ``scheme://user:PASSWORD@`` anywhere in a text (a URL quoted in a message ends at white space): the password runs
#: to the last ``@`` of the URL, as in :data:`_USERINFO_PASSWORD`; and its ``user%3APASSWORD@`` form.
_TEXT_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://(?:[^\s:/][^\s:]*)?:)(\S*)(@)")
_TEXT_URL_ENCODED = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*?%(?:25)*3[Aa])([^\s:]*)(@)")
#: A query pair anywhere in a text: the value runs to the next ``&`` or white space.
_TEXT_QUERY_PAIR = re.compile(r"[?&]([^=&?\s]*)=([^&\s]*)")
#: Where a URL starts in one argument of a printed command: its scheme and ``://``.
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: Pieces of a known password at least this long are masked wherever a message holds them (shorter ones would mask
#: ordinary words).
_MIN_SECRET = 4
#: redacted URL → the URL as the spec wrote it (may still name ``${VAR}``s); this driver process only.
_REAL: dict[str, str] = {}


def secret_key(key: str) -> bool:
    """Whether a URL's query key names a secret as its driver reads it: SQLAlchemy's ``parse_qsl`` percent-decodes a
    key (``passw%6Frd`` is ``password``, ``+`` a space), so the key is matched after each round of decoding, not as
    spelled."""
    forms = {key}
    for _ in range(_DECODE_ROUNDS):
        forms |= {unquote(f) for f in forms} | {unquote_plus(f) for f in forms}
    return any(_SECRET_KEY.fullmatch(f) for f in forms)


def _secret_spans(url: str, text: bool = False) -> list[tuple[int, int]]:
    """Where the secrets of ``url`` (or of every URL of a message, ``text``) stand: each userinfo password and each
    value of a secret query key, as ``(start, end)`` spans, sorted and merged."""
    if text:
        userinfo = [m.span(2) for p in (_TEXT_URL_PASSWORD, _TEXT_URL_ENCODED) for m in p.finditer(url)]
        pairs = _TEXT_QUERY_PAIR.finditer(url)
    else:
        found = _USERINFO_PASSWORD.match(url) or _USERINFO_ENCODED.match(url)
        userinfo = [found.span(2)] if found else []
        pairs = _QUERY_PAIR.finditer(url)
    spans = sorted(userinfo + [m.span(2) for m in pairs if secret_key(m.group(1))])
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _mask_spans(url: str, spans: list[tuple[int, int]], keep_variables: bool = True) -> str:
    """``url`` with each span replaced by :data:`MASK`, except (``keep_variables``) a ``${VAR}`` reference: not a
    secret, kept as written so that the masked form still says where the secret comes from."""
    for start, end in reversed(spans):
        if not (keep_variables and _ENV_VAR.fullmatch(url[start:end])) and url[start:end] != MASK:
            url = url[:start] + MASK + url[end:]
    return url


def redact(url: str) -> str:
    """``url`` with a literal password (userinfo or the value of a ``password=`` style query key, however the key is
    percent-encoded) replaced by ``***``.

    ``${VAR}`` references are not secrets and stay as written, so a redacted URL still says where the secret
    comes from. Everything else is kept byte for byte (``sqlite:////abs/path`` stays as it is).
    """
    return _mask_spans(url, _secret_spans(url))


def written_secrets(url: str) -> list[str]:
    """The secrets written into ``url`` as its driver reads them (``${VAR}`` references are none): SQLAlchemy's
    :func:`~sqlalchemy.engine.make_url` for a database URL, :func:`urllib.parse.urlsplit` for any other, each
    decoding the userinfo's password and the query's keys. A second reading beside :func:`redact`'s, which goes by
    the spelling: what either finds is refused (:func:`study.deploy.checks.refuse_written_passwords`)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    pairs: list[tuple[str, str | None]] = []
    with contextlib.suppress(ArgumentError, ValueError):  # not a URL SQLAlchemy reads: urllib's reading below
        parsed = make_url(url)
        pairs += [("password", parsed.password)]
        pairs += [(k, v) for k, vs in parsed.query.items() for v in ((vs,) if isinstance(vs, str) else vs)]
    with contextlib.suppress(ValueError):  # an invalid IPv6 host
        parts = urlsplit(url)
        pairs += [("password", None if parts.password is None else unquote(parts.password))]
        pairs += parse_qsl(parts.query, keep_blank_values=True)
    values = [v for k, v in pairs if v and secret_key(k) and not _ENV_VAR.fullmatch(v)]
    return list(dict.fromkeys(values))  # the two readings mostly agree: each secret once


def mask_passwords(text: str, keep_variables: bool = False) -> str:
    """``text`` (an error message, a library's log line) with every URL's password and ``password=``-style query
    value replaced by ``***`` (a ``${VAR}`` reference too, unless ``keep_variables``), and every password of a URL
    this process remembers (:func:`remember`: the spec's tracking URLs) masked wherever it appears, whole or in
    pieces split at ``/ ? # : @``, as written and percent-decoded: a driver's message may quote a host that a raw
    ``@`` in the password made up."""
    text = _mask_spans(text, _secret_spans(text, text=True), keep_variables)
    for secret in sorted(_known_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def mask_argument(word: str) -> str:
    """One argument of a printed command with its secrets masked where they stand, and nothing else changed: from the
    argument's first URL (``ray://…`` of ``--address``, ``postgresql://…`` of ``--set tracking.uri=…``) to its end,
    the URL's password and its secret query values (:func:`redact`: the URL is the rest of the argument, so a
    password holding white space or quotes is masked whole). Text before a URL, or in an argument without one, is no
    URL: a path holding ``?pass=`` is printed as written, and so is a word that happens to hold a known password
    (``study`` of ``postgresql://study:study@…`` in ``study.run``), so that the pasted line runs the same command.
    A ``${VAR}`` is kept: the command, pasted, then connects as the one printed it did."""
    found = _URL_START.search(word)
    if found is None:
        return word
    return word[: found.start()] + redact(word[found.start() :])


def shell_command(words: Sequence[str]) -> str:
    """A command to print, for a person to paste into a shell: every argument masked first, then quoted
    (:func:`shlex.join`), so that a shell reads back each argument, its secrets masked. Masking after quoting
    could swallow a closing quote (``'...?password=***``: the value ran to the line's end)."""
    return shlex.join(mask_argument(w) for w in words)


def _known_secrets() -> set[str]:
    """The passwords of the URLs this process remembers (and of the ``${VAR}``s they name), with their pieces."""
    found: set[str] = set()
    for url in _REAL.values():
        values = [url[start:end] for start, end in _secret_spans(url)] + written_secrets(url)
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
        real = connection_url(self._redacted_url, key)
        with creating_optuna_schema(real):
            super().__init__(real, **kwargs)

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["url"] = self._redacted_url
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        state = dict(state)
        state["url"] = connection_url(state["_redacted_url"], "tracking.optuna_uri")
        super().__setstate__(state)

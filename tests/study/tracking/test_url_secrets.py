"""No part of a URL's password in any error or log line (issue 40).

Property-style: many adversarial passwords (raw ``/ @ : ? # %``, quotes, white space; also percent-encoded), each
written into every URL a spec may hold (``tracking.uri``, ``tracking.optuna_uri``, ``storage``) and an S3 endpoint,
sent through the functions that turn a URL into text (the spec's checks, :func:`redact`, :func:`mask_passwords`, the
pre-flight) and through the real command line. The property: neither the password nor any 4-character piece of it
(as written or percent-encoded) appears in what is printed.
"""

from __future__ import annotations

import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from harness.driver import REPO, tiny_spec
from study.intake.spec_reader import parse_spec
from study.tracking import credentials
from study.tracking.credentials import MASK, mask_passwords, redact, remember
from study.tracking.preflight import check_database, check_storage_uri, endpoint
from study.tracking.server import free_port
from trainables.schema.errors import SpecError

_PIECE = 4
#: The characters a parser splits a URL at, and others a YAML file or a message quotes.
_SPECIAL = "/@:?#%&=;+!$'\"~ \t"
#: Letters and digits of the passwords: upper case with no vowel, so no piece of one is a word of a message.
_WORD = "BCDFGHJKLMNPQRSTVWXZ"


def _passwords(n: int, seed: int = 40) -> list[str]:
    """``n`` passwords of 6-20 characters, each with at least one special character; a few fixed ones first."""
    rng = random.Random(seed)
    fixed = ["Zx9Secret/Qk", "p@ssWORD1", "a?bcdefgh", "abc#defgh", "QK:LM:NP", "%2FKQ%40ZZ", "KQ@ZZ/RT?XV#WB:Y"]
    out = list(fixed)
    while len(out) < n:
        chars = [rng.choice(_WORD + string.digits) for _ in range(rng.randint(6, 20))]
        for _ in range(rng.randint(1, 4)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(_SPECIAL))
        out.append("".join(chars))
    return out


def _pieces(password: str) -> set[str]:
    """The password, its percent-encoded form and every 4-character piece of either that holds a letter or digit
    (a piece of special characters alone, like ``://``, is a message's own text too)."""
    out: set[str] = set()
    for form in (password, quote(password, safe="")):
        if len(form) >= _PIECE:
            out.add(form)
        pieces = (form[i : i + _PIECE] for i in range(len(form) - _PIECE + 1))
        out.update(p for p in pieces if any(c.isalnum() for c in p))
    return out


def _leaks(text: str, password: str) -> list[str]:
    return sorted(p for p in _pieces(password) if p in text)


PASSWORDS = _passwords(300)
#: Passwords a URL inside a message can hold: white space ends a URL in a text, and the spec refuses it.
NO_SPACE = [p for p in PASSWORDS if not any(c.isspace() for c in p)]


def _urls(password: str) -> dict[str, str]:
    """Every kind of URL a spec or the environment may hold, with ``password`` written raw."""
    return {
        "postgresql": f"postgresql://u:{password}@db:5432/optuna",
        "mysql+driver": f"mysql+pymysql://user:{password}@10.0.0.7/db?charset=utf8",
        "http": f"http://mlflow:{password}@127.0.0.1:5000",
        "s3": f"s3://AKIAKEY:{password}@bucket/prefix",
    }


def _spec_error(key: str, url: str) -> str:
    """The line the command line prints for a spec with ``url`` at ``key`` ("" when the spec is accepted)."""
    raw = tiny_spec("t_secret", epochs=1)
    if key == "storage":
        raw["storage"] = url
    else:
        raw["tracking"] = {key.removeprefix("tracking."): url}
    try:
        parse_spec(raw, "spec.yaml")
    except SpecError as e:
        return str(e)
    return ""


def test_the_pieces_are_found():
    """The property can fail: a password printed, or a piece of it, is found."""
    assert _leaks("error: as 'Zx9Secret'", "Zx9Secret/Qk") == ["9Sec", "Secr", "Zx9S", "cret", "ecre", "x9Se"]
    assert _leaks("at %2FQk", "Zx9Secret/Qk") == ["%2FQ", "2FQk"]
    assert _leaks("nothing here", "Zx9Secret/Qk") == []


@pytest.mark.parametrize("key", ["tracking.optuna_uri", "tracking.uri", "storage"])
def test_spec_errors_never_quote_a_password(key):
    checked = refused = 0
    for password in PASSWORDS:
        for kind, url in _urls(password).items():
            if (key == "storage") != (kind == "s3") or key == "tracking.optuna_uri" and kind == "http":
                continue
            for written in (url, url.replace(password, quote(password, safe=""))):
                line = _spec_error(key, written)
                checked += 1
                refused += bool(line)
                assert not line or line.startswith(f"spec.yaml: {key}: "), line  # refused for its URL
                assert not _leaks(line, password), (written, line)
    assert checked >= 600 and refused >= 300  # raw reserved characters are refused, without quoting them


def test_raw_reserved_characters_are_refused_with_the_fix():
    line = _spec_error("tracking.optuna_uri", "postgresql://u:Zx9Secret/Qk@db:5432/optuna")
    assert "percent-encode" in line and "%2F" in line and "Zx9" not in line and "Qk" not in line
    # an '@' in the password: SQLAlchemy would connect to the host 'ssWORD1@db' with the password 'p'
    assert "percent-encode" in _spec_error("tracking.uri", "postgresql://u:p@ssWORD1@db:5432/o")
    assert "credentials" in _spec_error("storage", "s3://AKIAKEY:SECRETKEY@bucket/prefix")
    # percent-encoded, the same passwords are accepted (SQLAlchemy decodes them)
    assert _spec_error("tracking.optuna_uri", "postgresql://u:Zx9Secret%2FQk@db:5432/optuna") == ""
    assert _spec_error("tracking.uri", "postgresql://u:p%40ssWORD1@db:5432/o") == ""


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:Zx9Secret/Qk@db:5432/optuna", f"postgresql://u:{MASK}@db:5432/optuna"),
        ("postgresql://u:p@ssWORD1@db:5432/o", f"postgresql://u:{MASK}@db:5432/o"),
        ("postgresql://u:a?b#c:d@db/x", f"postgresql://u:{MASK}@db/x"),
        ("postgresql://:pw@h/db", f"postgresql://:{MASK}@h/db"),
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),  # no password
        ("sqlite:////abs/a:b@c.db", "sqlite:////abs/a:b@c.db"),  # no authority: a path
        ("s3://bucket/key?secret_key=SK1&region=x", f"s3://bucket/key?secret_key={MASK}&region=x"),
    ],
)
def test_redact_ends_the_userinfo_at_the_last_at(url, expected):
    assert redact(url) == expected


def test_redact_and_endpoint_never_keep_a_password():
    for password in PASSWORDS:
        for url in _urls(password).values():
            for written in (url, url.replace(password, quote(password, safe=""))):
                assert not _leaks(redact(written), password), written
                assert not _leaks(endpoint(redact(written)), password), written


def test_mask_passwords_in_messages():
    for password in NO_SPACE:
        for url in _urls(password).values():
            for written in (url, url.replace(password, quote(password, safe=""))):
                for text in (f"failed for {written}", f"failed for '{written}': boom", f"({written}) and more"):
                    assert not _leaks(mask_passwords(text), password), text


@pytest.mark.parametrize("key", ["password", "PASSWORD", "passwd", "pwd", "token", "access_token", "secret", "api_key"])
@pytest.mark.parametrize("first", ["?", "&"])
def test_mask_passwords_masks_query_secrets(key, first):
    """Issue 40: ``?password=`` values were printed; every key :func:`redact` masks is masked in a message too."""
    url = f"sqlite:////abs/o.db{'?a=1' if first == '&' else ''}{first}{key}=QSECRET7x&timeout=3#frag"
    text = f"cannot open '{url}' (and then {key}=QSECRET7x is no URL)"
    masked = mask_passwords(text)
    assert f"{first}{key}={MASK}&timeout=3#frag" in masked
    assert masked.count("QSECRET7x") == 1  # the bare word is no URL's query: kept (nothing names it a secret)
    assert "QSECRET7x" not in redact(url)


def test_mask_passwords_masks_query_secrets_everywhere_it_is_used(tmp_path, capsys):
    """The masking reaches the console's log lines and the command lines' one-line errors."""
    import logging

    from study.arguments import one_line
    from study.console import StudyLog, _ToStudyLog

    assert "QSECRET7x" not in one_line("bad sqlite:///x.db?password=QSECRET7x")
    log = StudyLog()
    log.attach(str(tmp_path / "study.log"))
    handler = _ToStudyLog(log)
    record = logging.LogRecord("optuna", logging.ERROR, __file__, 1, "lost sqlite:///o.db?token=QSECRET7x", (), None)
    handler.emit(record)
    log.close()
    written = (tmp_path / "study.log").read_text()
    assert "QSECRET7x" not in capsys.readouterr().err
    assert "QSECRET7x" not in written and f"token={MASK}" in written


def test_a_remembered_password_is_masked_in_pieces(monkeypatch):
    """A driver may quote a host that a raw '@' made up from the password: a remembered password is masked in
    pieces wherever it appears, and a ``${VAR}``'s value too."""
    monkeypatch.setattr(credentials, "_REAL", {})
    monkeypatch.setenv("DMLS_URL_SECRET", "ENVPW/KQZX")
    remember("postgresql://u:p%40ssWORD1@db/o")
    remember("postgresql://u:${DMLS_URL_SECRET}@db/o")
    text = mask_passwords('could not translate host name "ssWORD1@db"; ENVPW/KQZX; p@ssWORD1')
    assert "ssWORD1" not in text and "ENVPW" not in text and "KQZX" not in text, text


@pytest.mark.parametrize("password", [p for p in PASSWORDS if not any(c.isspace() for c in p)][:40])
def test_preflight_errors_never_quote_a_password(password, monkeypatch):
    """A percent-encoded password passes the spec; the pre-flight then fails to connect (a port nobody listens on,
    or a missing driver): its line names no part of the password."""
    monkeypatch.setattr(credentials, "_REAL", {})
    port = free_port()
    encoded = quote(password, safe="")
    for url in (f"postgresql://u:{encoded}@127.0.0.1:{port}/optuna", f"mysql://u:{encoded}@127.0.0.1:{port}/db"):
        with pytest.raises(SpecError) as e:
            check_database(remember(url), "tracking.optuna_uri")
        assert not _leaks(str(e.value), password), str(e.value)


@pytest.mark.parametrize("password", ["Zx9Secret/Qk", "KQ@ZZ/RT?XV#WB:Y"])
def test_storage_preflight_never_quotes_the_endpoints_password(password, monkeypatch):
    """An S3 endpoint with a ``user:password@`` (pyarrow retries a refused connection: some seconds each)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://key:{quote(password, safe='')}@127.0.0.1:{free_port()}")
    with pytest.raises(SpecError) as e:
        check_storage_uri("s3://bucket/prefix")
    assert "cannot reach the object store at http://key:***@127.0.0.1:" in str(e.value)
    assert not _leaks(str(e.value), password), str(e.value)


def _cli(directory: Path, spec: dict) -> subprocess.CompletedProcess:
    """``python -m study.run`` on ``spec`` in ``directory`` (its own: these run at the same time); Ray must not start."""
    directory.mkdir()
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": ray_tmp}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard"],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,  # three at once, on CI beside another test
        )
        assert not any(Path(ray_tmp).iterdir()), "Ray was started"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return done


#: Through the command line: a few passwords that hold each special character, raw and percent-encoded.
_CLI_PASSWORDS = ["Zx9Secret/Qk", "p@ssWORD1", "QK:LM:NP", "a?bcdefgh", "abc#defgh", "KQ@ZZ/RT?XV#WB:Y", "%2FKQ%40ZZ"]


@pytest.mark.parametrize(
    ("password", "encoded"),
    [(p, False) for p in _CLI_PASSWORDS] + [(p, True) for p in ("Zx9Secret/Qk", "p@ssWORD1", "KQ@ZZ/RT?XV#WB:Y")],
)
def test_command_line_never_prints_a_password(password, encoded, tmp_path):
    """Raw, the spec refuses the URL; percent-encoded, the pre-flight cannot connect: one line, exit 2 either way.
    The three drivers run at the same time (each pays the study's imports before its pre-flight refuses)."""
    written = quote(password, safe="") if encoded else password
    port = free_port()  # nobody listens: an accepted URL fails the pre-flight
    cases = {
        "optuna": {"tracking": {"optuna_uri": f"postgresql://u:{written}@127.0.0.1:{port}/optuna"}},
        "mlflow": {"tracking": {"uri": f"http://mlflow:{written}@127.0.0.1:{port}"}},
        "storage": {"storage": f"s3://AKIAKEY:{written}@bucket/prefix"},
    }
    specs = {
        name: {**tiny_spec("t_secret", epochs=1), "storage": str(tmp_path / name / "runs"), **over}
        for name, over in cases.items()
    }
    with ThreadPoolExecutor(len(specs)) as pool:
        runs = {name: pool.submit(_cli, tmp_path / name, spec) for name, spec in specs.items()}
        done_of = {name: run.result() for name, run in runs.items()}
    for name, done in done_of.items():
        out = done.stdout + done.stderr
        assert done.returncode == 2, (name, out[-2000:])
        assert done.stderr.splitlines() == [done.stderr.strip()], (name, out[-2000:])  # one line
        assert not _leaks(out, password), (name, out)
        assert not (tmp_path / name / "runs").exists()


# --- secrets by meaning: a key as its driver decodes it (issue 60) ----------------------------------------------------

#: The keys SQLAlchemy hands a driver a password or token under (psycopg/libpq's ``password``, PyMySQL's ``passwd``).
_SECRET_QUERY_KEYS = ["password", "passwd", "sslpassword", "token", "api_key", "secret_access_key"]


def _encodings(key: str, rng: random.Random) -> list[str]:
    """Spellings of ``key`` that decode to it: every character, a random few, in either case of hex; once or twice."""
    whole = "".join(f"%{ord(c):02X}" for c in key)
    some = "".join(f"%{ord(c):02x}" if rng.random() < 0.4 else c for c in key)
    twice = key[:-1] + f"%25{ord(key[-1]):02X}"
    return [key.upper(), whole, some, key[:5] + f"%{ord(key[5]):02X}" + key[6:] if len(key) > 5 else whole, twice]


def test_a_percent_encoded_secret_key_is_masked_and_refused():
    """``?passw%6Frd=`` is ``password`` to SQLAlchemy (``make_url`` decodes the query's keys): masked in the URL and in
    a message, found by :func:`written_secrets`, and refused by ``dmlstudy slurm``/``kuberay``'s check."""
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    from study.deploy.checks import refuse_written_passwords
    from study.tracking.credentials import written_secrets

    rng = random.Random(60)
    for key in _SECRET_QUERY_KEYS:
        for spelled in _encodings(key, rng):
            url = f"postgresql://u@db:5432/optuna?charset=utf8&{spelled}=Hunter2secret&x=1"
            if "%25" not in spelled:  # what the driver is given: the decoded key
                assert make_url(url).query[key.upper() if spelled == key.upper() else key] == "Hunter2secret"
            assert redact(url).endswith(f"{spelled}={MASK}&x=1"), url
            assert "Hunter2" not in mask_passwords(f"failed for '{url}': boom"), url
            assert written_secrets(url) == ["Hunter2secret"], url
            spec = SimpleNamespace(tracking=SimpleNamespace(uri=None, optuna_uri=url))
            with pytest.raises(SpecError, match="holds a password written into the URL"):
                refuse_written_passwords([spec], "name a variable instead")  # type: ignore[list-item]


@pytest.mark.parametrize("key", ["pass+word", "passwords", "charset", "pass%2Bword", "x%70assword"])
def test_a_key_that_is_no_secrets_keeps_its_value(key):
    url = f"postgresql://u@db/o?{key}=Plain1"
    assert redact(url) == url and mask_passwords(url) == url


def test_written_secrets_reads_the_password_the_driver_reads():
    """:func:`written_secrets` takes SQLAlchemy's and urllib's reading of the userinfo (decoded), a ``${VAR}`` none."""
    from study.tracking.credentials import written_secrets

    assert written_secrets("postgresql://u:p%40ss%2Fword@db/o") == ["p@ss/word"]
    assert written_secrets("http://mlflow:Zx9Secret@127.0.0.1:5000") == ["Zx9Secret"]
    assert written_secrets("postgresql://u:${OPTUNA_DB_PASSWORD}@db/o?token=${T}") == []
    assert written_secrets("postgresql://u@db/o?%74oken=Hunter2") == ["Hunter2"]
    assert written_secrets("not a url") == []


def test_an_encoded_colon_in_the_userinfo_is_masked():
    """``u%3Apw@``: a user name holding ':' to SQLAlchemy, a password to anyone who decodes first: masked after it."""
    assert redact("postgresql://u%3AHunter2@db/o") == f"postgresql://u%3A{MASK}@db/o"
    assert redact("postgresql://u%253AHunter2@db/o") == f"postgresql://u%253A{MASK}@db/o"
    assert "Hunter2" not in mask_passwords("at postgresql://u%3aHunter2@db/o: refused")
    assert redact("postgresql://u@db/o%3Ax") == "postgresql://u@db/o%3Ax"  # no userinfo: kept


def test_a_variable_reference_stays_in_a_printed_command():
    """``${VAR}`` is no secret: a printed command keeps it (pasted, it then connects as the one printed it did)."""
    from study.tracking.credentials import mask_argument

    word = "tracking.optuna_uri=postgresql://u:${OPTUNA_DB_PASSWORD}@db/o?token=${TOKEN}&password=Hunter2"
    expected = f"tracking.optuna_uri=postgresql://u:${{OPTUNA_DB_PASSWORD}}@db/o?token=${{TOKEN}}&password={MASK}"
    assert mask_argument(word) == expected

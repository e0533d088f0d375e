"""A real PostgreSQL server for tests, from Debian's package: ``initdb`` in a temporary directory as the ``postgres``
user, bound to 127.0.0.1 on a free port, its superuser password taken from an environment variable (never written to
a file: ``it is set through the test's own unix socket). The test owns the server's process (``pg_ctl`` by data directory); it can
stop and start it again to play a restart or failover.

    with postgres_server() as pg:          # PGTEST_PASSWORD (or a random one) is the password
        pg.create_database("optuna")
        url = pg.url("optuna")             # postgresql://postgres:${PGTEST_PASSWORD}@127.0.0.1:PORT/optuna
        pg.restart(down_s=5)
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from study.tracking.server import free_port

__all__ = ["PASSWORD_ENV", "postgres_unavailable_reason", "Postgres", "postgres_server"]

#: The environment variable holding the test server's password (URLs name it as ``${PGTEST_PASSWORD}``).
PASSWORD_ENV = "PGTEST_PASSWORD"


def descendants_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a postmaster's backends and workers)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def postgres_unavailable_reason() -> str | None:
    """Why no test server can be started here (``None``: it can)."""
    if _bin_dir() is None:
        return "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb; apt-get install postgresql)"
    if os.geteuid() != 0:
        return "starting PostgreSQL as the postgres user needs root"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return 'psycopg is not installed (pip install -e ".[postgres]")'
    return None


class Postgres:
    """One server: ``root`` holds its data directory, socket and log, all owned by ``postgres``."""

    def __init__(self, root: Path, password: str, port: int) -> None:
        self.root, self.password, self.port = root, password, port
        bin_dir = _bin_dir()
        assert bin_dir is not None, postgres_unavailable_reason()
        self.bin: Path = bin_dir
        self.data = root / "data"
        self.log = root / "postgres.log"

    def _as_postgres(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, **kw)  # type: ignore[call-overload]

    def init(self) -> None:
        # Password logins over TCP only; the unix socket (in ``root``, this test's own) trusts the postgres user, and
        # sets the password through it once the server runs: the password reaches no file and no command line.
        self._as_postgres(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
            ]
        )

    def _set_password(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(host=str(self.root), port=self.port, user="postgres", autocommit=True) as con:
            con.execute(sql.SQL("ALTER USER postgres PASSWORD {}").format(sql.Literal(self.password)))

    def start(self) -> None:
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c full_page_writes=off"
        self._as_postgres(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start"]
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast``: roll back open transactions and close connections (a restart); ``immediate``: as a crash."""
        self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(
        self, down_s: float = 5.0, mode: str = "fast", until: Callable[[], bool] | None = None, cap_s: float = 90.0
    ) -> None:
        """Stop, stay down ``down_s`` and, with ``until``, on until ``until()`` holds (at most ``cap_s``): a client
        that touches the database only now and then (the driver's Optuna store, once per epoch) is sure to meet the
        outage under any load, then start."""
        self.stop(mode)
        time.sleep(down_s)
        deadline = time.monotonic() + cap_s
        while until is not None and not until() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.start()

    def crash(self, down_s: float = 5.0) -> None:
        """A crash: SIGKILL the postmaster (its backends see it die and exit, open transactions are lost), then start
        again after ``down_s``, which runs crash recovery from the write-ahead log."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = descendants_of(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in [pid, *children]) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(down_s)
        self.start()

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, database: str, password: str | None = None, user: str = "postgres") -> str:
        """A URL naming the password by its environment variable unless ``password`` is given."""
        secret = "${" + PASSWORD_ENV + "}" if password is None else password
        return f"postgresql://{user}:{secret}@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", password=self.password, dbname=database, autocommit=True
        ) as con:
            con.execute(sql)

    def create_database(self, name: str) -> None:
        self.execute(f'CREATE DATABASE "{name}"')


@contextlib.contextmanager
def postgres_server(password: str | None = None, port: int | None = None) -> Iterator[Postgres]:
    """A started server; the password is ``$PGTEST_PASSWORD`` (set to a random one when unset). Stopped and removed
    afterwards."""
    password = password or os.environ.setdefault(PASSWORD_ENV, secrets.token_hex(12))
    root = Path(tempfile.mkdtemp(prefix="pg", dir="/tmp"))
    shutil.chown(root, "postgres", "postgres")
    pg = Postgres(root, password, port or free_port())
    try:
        pg.init()
        pg.start()
        pg._set_password()
        yield pg
    finally:
        if pg.running:
            with contextlib.suppress(subprocess.CalledProcessError):
                pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)

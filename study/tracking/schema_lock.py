"""One Optuna schema per database, however many drivers create it at once.

Optuna's ``RDBStorage`` creates its tables (SQLAlchemy's ``metadata.create_all``) when it is built, with no lock:
two drivers, or a driver and its pre-flight check beside another, that build it on one fresh PostgreSQL database at the
same moment both issue ``CREATE TABLE`` and one of them fails with ``duplicate key value violates unique constraint
"pg_type_typname_nsp_index"`` (measured: 6 threads building it on a fresh database failed 5 of 6 in each of 5
rounds). :func:`creating_optuna_schema` holds a PostgreSQL advisory lock, one per database, while a storage is
built: the first creates the tables, the others find them. Other databases (SQLite files, which lock the whole file)
are left as Optuna has them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["creating_optuna_schema"]

#: The advisory lock's key: any fixed 64-bit number; the lock is per database (PostgreSQL scopes it so).
_LOCK_KEY = 0x646D6C7374756479  # "dmlstudy"


@contextlib.contextmanager
def creating_optuna_schema(url: str) -> Iterator[None]:
    """Hold the database's schema lock while the body builds an Optuna ``RDBStorage`` on ``url`` (the real URL)."""
    if not url.startswith(("postgresql", "postgres:")):
        yield
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK_KEY})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
    finally:
        engine.dispose()

"""PostgreSQL for tests: a brand-new database per test, created from an admin DSN.

The server comes from ``ONCEGRAPH_TEST_PG_DSN`` (default: the local ``test`` database,
trust auth). Tests never write into that database itself: each gets its own
``og_<prefix>_<random>`` database, dropped (``WITH (FORCE)``) afterwards, so parallel
test processes, other checkouts and other versions of the schema never meet.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

DSN_ENV = "ONCEGRAPH_TEST_PG_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def admin_dsn() -> str:
    """The DSN new test databases are created from."""
    return os.environ.get(DSN_ENV, DEFAULT_DSN)


def unreachable(dsn: str) -> str | None:
    """Why ``dsn`` cannot be reached, or None when a connection succeeds."""
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=10, autocommit=True).close()
    except psycopg.Error as exc:
        return f"{exc}".strip() or type(exc).__name__
    return None


@contextmanager
def fresh_database(admin: str, prefix: str = "test") -> Iterator[str]:
    """Create an empty database, yield its DSN, drop it afterwards (even on errors)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"og_{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(admin, dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


__all__ = ["DEFAULT_DSN", "DSN_ENV", "admin_dsn", "fresh_database", "unreachable"]

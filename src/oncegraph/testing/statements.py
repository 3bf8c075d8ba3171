"""Counting the SQL statements a piece of work sends to its database, for benchmarks and
tests that hold a path to a number of statements (a count, deterministic; never a time).

``with counting(store) as counted: ...`` counts every statement the block executes:

* on PostgreSQL, each statement psycopg executes in this process (``execute``, and each
  parameter set of ``executemany``), on any connection: the block should use one store;
* on SQLite, each statement the store's connection runs (``sqlite3``'s trace callback);
* on the memory store, none.

Transaction control (``BEGIN``, ``COMMIT``, ``ROLLBACK``, savepoints) is not counted: it
is how a store groups statements, not work of its own. ``counted.sql`` lists what ran,
in order, to say what a count is made of.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END")


@dataclass(slots=True)
class Counted:
    """The statements a :func:`counting` block executed."""

    sql: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.sql)

    def add(self, sql: Any) -> None:
        text = sql.decode() if isinstance(sql, bytes) else str(sql)
        text = " ".join(text.split())
        if not text.upper().startswith(_CONTROL):
            self.sql.append(text)


@contextmanager
def counting(store: Any) -> Iterator[Counted]:
    """Count the statements run against ``store`` inside the block (module docstring).
    The store must be set up first (its SQLite connection open)."""
    counted = Counted()
    conn = getattr(store, "_conn", None)
    if isinstance(conn, sqlite3.Connection):
        conn.set_trace_callback(counted.add)
        try:
            yield counted
        finally:
            conn.set_trace_callback(None)
        return
    if type(store).__name__ != "PgCheckpointer":
        yield counted  # the memory store runs no SQL
        return
    with _psycopg_counted(counted):
        yield counted


@contextmanager
def _psycopg_counted(counted: Counted) -> Iterator[None]:
    import psycopg

    cls = psycopg.AsyncCursor
    execute, executemany = cls.execute, cls.executemany

    async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counted.add(_text(query))
        return await execute(self, query, *args, **kwargs)

    async def counted_executemany(self: Any, query: Any, params: Any, **kwargs: Any) -> Any:
        params = list(params)
        for _ in params:
            counted.add(_text(query))
        return await executemany(self, query, params, **kwargs)

    setattr(cls, "execute", counted_execute)  # noqa: B010 - psycopg's class, for the block
    setattr(cls, "executemany", counted_executemany)  # noqa: B010
    try:
        yield
    finally:
        setattr(cls, "execute", execute)  # noqa: B010
        setattr(cls, "executemany", executemany)  # noqa: B010


def _text(query: Any) -> str:
    if isinstance(query, str | bytes):
        return query.decode() if isinstance(query, bytes) else query
    return repr(query)  # a psycopg.sql.Composed: its repr names its parts


__all__ = ["Counted", "counting"]

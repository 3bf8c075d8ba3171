"""Seal a database in place: every clear or older-format value of a sealed column becomes
an ``enc2:`` value bound to its table, column and row (``oncegraph db encrypt``).

For each table of :data:`~oncegraph.storage.sql.rows.SEALED_COLUMNS` the rows are walked
in key order, a batch at a time, each batch in its own transaction: a clear value is
sealed as it is, an ``enc1:`` value is opened and sealed again bound to its place, an
``enc2:`` value is checked (it must open for its place) and left alone. Each value is
written with a compare-and-set on the value read (``WHERE key = ... AND column = old``),
so a process writing the row meanwhile wins and its value is kept as written.

Invariants: idempotent (a second run finds everything sealed and writes nothing);
nothing is ever decoded or re-encoded beyond the sealing, so a value comes back exactly
as it was; a value that does not authenticate, or that needs a key id the ring lacks,
stops the command with the row named, before anything of that batch is written.
Works on SQLite (``sqlite3``) and PostgreSQL (``psycopg``, sync), both with ``?``
placeholders translated here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from oncegraph.errors import CorruptRecordError
from oncegraph.storage.encryption import BOUND, PREFIX, EncryptionKeys, describe, place
from oncegraph.storage.sql.rows import SEALED_COLUMNS


class Connection(Protocol):
    """What :func:`reseal` needs of a database connection (see :func:`sqlite_connection`,
    :func:`postgres_connection`)."""

    def fetchall(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]: ...

    def execute(self, sql: str, params: Sequence[Any]) -> int: ...

    def commit(self) -> None: ...


@dataclass(slots=True)
class ResealReport:
    """Values written: ``sealed`` (were clear), ``resealed`` (were ``enc1:``), and
    ``kept`` (already bound to their place); ``skipped``: changed by another writer
    while the command ran (theirs kept); per table in ``tables``."""

    sealed: int = 0
    resealed: int = 0
    kept: int = 0
    skipped: int = 0
    tables: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        text = (
            f"sealed {self.sealed} clear values and re-sealed {self.resealed} values of the "
            f"older format bound to their row; {self.kept} were already sealed"
        )
        if self.skipped:
            text += f"; {self.skipped} changed meanwhile and were kept as their writer wrote them"
        return text


def _bound(keys: EncryptionKeys, value: str, where: str) -> str | None:
    """The value as it must be stored, or None when it already is."""
    if value.startswith(BOUND):
        keys.open(value, where)  # must authenticate for this place
        return None
    if value.startswith(PREFIX):
        return keys.seal(keys.open(value), where)
    return keys.seal(value, where)


def reseal(
    conn: Connection,
    keys: EncryptionKeys,
    *,
    batch: int = 500,
    on_batch: Callable[[str, int], None] | None = None,
) -> ResealReport:
    """Seal every value of every sealed column (see the module docstring)."""
    report = ResealReport()
    for table, (key_columns, columns) in SEALED_COLUMNS.items():
        n = len(key_columns)
        keys_sql = ", ".join(key_columns)
        select = f"SELECT {keys_sql}, {', '.join(columns)} FROM {table}"
        after_sql = (
            f" WHERE ({keys_sql}) > ({', '.join('?' * n)})" if n > 1 else f" WHERE {keys_sql} > ?"
        )
        order = f" ORDER BY {keys_sql} LIMIT ?"
        match = " AND ".join(f"{k} = ?" for k in key_columns)
        after: tuple[Any, ...] | None = None
        done = 0
        while True:
            if after is None:
                found = conn.fetchall(select + order, (batch,))
            else:
                found = conn.fetchall(select + after_sql + order, (*after, batch))
            writes: list[tuple[str, tuple[Any, ...]]] = []
            for row in found:
                key = tuple(row[:n])
                for column, value in zip(columns, row[n:], strict=True):
                    if value is None:
                        continue
                    where = place(table, column, *key)
                    try:
                        new = _bound(keys, str(value), where)
                    except ValueError as exc:
                        raise CorruptRecordError(
                            f"corrupt row: {describe(where)}: {exc}. Nothing of this batch "
                            "was written; restore the row from a backup, then run the "
                            "command again.",
                            table=table,
                            key=key if n > 1 else key[0],
                            column=column,
                        ) from exc
                    if new is None:
                        report.kept += 1
                        continue
                    sql = f"UPDATE {table} SET {column} = ? WHERE {match} AND {column} = ?"
                    writes.append((sql, (new, *key, value)))
                    if str(value).startswith(PREFIX):
                        report.resealed += 1
                    else:
                        report.sealed += 1
            for sql, params in writes:
                if conn.execute(sql, params) != 1:
                    report.skipped += 1
            conn.commit()
            done += len(writes)
            if on_batch is not None:
                on_batch(table, done)
            if len(found) < batch:
                break
            after = tuple(found[-1][:n])
        report.tables[table] = done
    return report


class _Sqlite:
    def __init__(self, path: str) -> None:
        import sqlite3

        self._conn = sqlite3.connect(path, timeout=30)

    def fetchall(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        return self._conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any]) -> int:
        return self._conn.execute(sql, params).rowcount

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


def _pg(sql: str) -> Any:
    """``?`` placeholders as psycopg's (the statements here hold no other ``?`` or ``%``)."""
    return sql.replace("?", "%s")


class _Postgres:
    def __init__(self, dsn: str, connect_timeout: int) -> None:
        import psycopg

        self._conn = psycopg.connect(dsn, connect_timeout=connect_timeout)

    def fetchall(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        return list(self._conn.execute(_pg(sql), params).fetchall())

    def execute(self, sql: str, params: Sequence[Any]) -> int:
        return self._conn.execute(_pg(sql), params).rowcount

    def commit(self) -> None:
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()


def reseal_sqlite(path: str, keys: EncryptionKeys, **kw: Any) -> ResealReport:
    """:func:`reseal` on the SQLite file ``path``."""
    conn = _Sqlite(path)
    try:
        return reseal(conn, keys, **kw)
    finally:
        conn.close()


def reseal_postgres(
    dsn: str, keys: EncryptionKeys, *, connect_timeout: int = 5, **kw: Any
) -> ResealReport:
    """:func:`reseal` on the PostgreSQL database ``dsn``."""
    conn = _Postgres(dsn, connect_timeout)
    try:
        return reseal(conn, keys, **kw)
    finally:
        conn.close()


__all__ = ["Connection", "ResealReport", "reseal", "reseal_postgres", "reseal_sqlite"]

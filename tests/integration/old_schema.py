"""A database as an older oncegraph left it, for the schema migration tests.

:func:`old_store` builds a SQLite file or a fresh PostgreSQL database at a given schema
version (every migration before it, as that version shipped) with rows of the test's
own, and returns a store on it: the store migrates it on ``setup()``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import pytest

from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.migrate import CREATE_VERSION_TABLE, INSERT_VERSION, plan
from oncegraph.storage.sql.schema import Dialect
from oncegraph.storage.sql.sqlite import SqliteCheckpointer

Execute = Callable[[str, Sequence[Any]], Any]
"""Run one statement with ``?`` placeholders and its parameters."""


def _build(
    execute: Execute, dialect: Dialect, version: int, fill: Callable[[Execute], None]
) -> None:
    execute(CREATE_VERSION_TABLE, ())
    for migration in plan(0)[:version]:
        for statement in migration.statements(dialect):
            execute(statement, ())
        execute(INSERT_VERSION, (migration.version, 1.0))
    fill(execute)


def old_store(
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    *,
    version: int,
    fill: Callable[[Execute], None],
) -> tuple[str, Checkpointer]:
    """A ``kind`` (``sqlite`` or ``postgres``) database at schema ``version`` holding
    what ``fill(execute)`` wrote: (its path or DSN, a store on it)."""
    if kind == "sqlite":
        path = tmp_path / "old.db"
        conn = sqlite3.connect(path)
        try:
            _build(conn.execute, "sqlite", version, fill)
            conn.commit()
        finally:
            conn.close()
        return str(path), SqliteCheckpointer(path)
    import psycopg

    from oncegraph.storage.checkpointer import PgCheckpointer

    dsn = str(request.getfixturevalue("fresh_dsn"))
    with psycopg.connect(dsn, autocommit=True) as pg:

        def execute(sql: str, params: Sequence[Any]) -> Any:
            return pg.execute(sql.replace("?", "%s"), params or None)

        _build(execute, "postgres", version, fill)
    return dsn, PgCheckpointer(dsn)


def app_runs(n: int, *, tenants: bool = False) -> list[RunRecord]:
    """``n`` runs ``run-00``, ``run-01``, ... on threads ``t0``, ``t1``, ..., one second
    apart from 100.0: of app ``a`` (odd) and ``b`` (even), failed every third, and with
    ``tenants`` of tenant ``t1`` two in four."""
    return [
        RunRecord(
            f"run-{i:02d}",
            f"t{i}",
            RunStatus.COMPLETED if i % 3 else RunStatus.FAILED,
            workflow_name="a" if i % 2 else "b",
            created_at=100.0 + i,
            updated_at=100.0 + i,
            app_id="a" if i % 2 else "b",
            tenant="t1" if tenants and i % 4 < 2 else None,
        )
        for i in range(n)
    ]


def insert_runs(
    execute: Execute, runs: Sequence[RunRecord], *, no_app_id: Collection[str] = ()
) -> None:
    """Insert ``runs`` as rows; those in ``no_app_id`` with app_id NULL, as an oncegraph
    older than schema migration 5 wrote them."""
    insert = f"INSERT INTO oncegraph_runs ({', '.join(S.RUN_COLUMNS)}) VALUES "
    insert += f"({', '.join('?' for _ in S.RUN_COLUMNS)})"
    for run in runs:
        params = list(rows.PLAIN.run_to_params(run))
        if run.run_id in no_app_id:
            params[S.RUN_COLUMNS.index("app_id")] = None
        execute(insert, params)

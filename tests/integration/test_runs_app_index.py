"""Schema migration 8: an app's runs are listed through an index on the app expression.

A run belongs to ``COALESCE(app_id, workflow_name)`` (a row from before migration 5 has
no app_id). Migration 5's index on the ``app_id`` column could not serve that
expression, so listing an app's runs read every run and sorted them; migration 8 indexes
the expression itself. A database at version 7 migrates with every run listed as before,
and both planners then read the listing from the index, in order, without a sort.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.migrate import CREATE_VERSION_TABLE, INSERT_VERSION
from oncegraph.storage.sql.schema import MIGRATIONS
from oncegraph.storage.sql.sqlite import SqliteCheckpointer


def _runs() -> list[RunRecord]:
    """Runs of apps ``a`` and ``b``; ``legacy`` has no app_id, so it is ``a``'s (its
    workflow_name)."""
    made = [
        RunRecord(
            f"run-{i:02d}",
            f"t{i}",
            RunStatus.COMPLETED if i % 3 else RunStatus.FAILED,
            workflow_name="a" if i % 2 else "b",
            created_at=100.0 + i,
            updated_at=100.0 + i,
            app_id="a" if i % 2 else "b",
        )
        for i in range(12)
    ]
    legacy = RunRecord(
        "run-legacy", "t-old", RunStatus.COMPLETED, workflow_name="a",
        created_at=50.0, updated_at=50.0,
    )  # fmt: skip
    return [*made, legacy]


def _old_database(execute: Any, mark: str, commit: Any) -> None:
    """Schema version 7 with ``_runs()`` in it (the legacy run's app_id left NULL)."""
    execute(CREATE_VERSION_TABLE)
    for version, steps in enumerate(MIGRATIONS[:7], start=1):
        for step in steps:
            statements = (step,) if isinstance(step, str) else step.statements(
                "sqlite" if mark == "?" else "postgres"
            )
            for statement in statements:
                execute(statement)
        execute(INSERT_VERSION.replace("?", mark), (version, 1.0))
    insert = f"INSERT INTO oncegraph_runs ({', '.join(S.RUN_COLUMNS)}) VALUES "
    insert += f"({', '.join(mark for _ in S.RUN_COLUMNS)})"
    for run in _runs():
        params = list(rows.PLAIN.run_to_params(run))
        if run.run_id == "run-legacy":
            params[S.RUN_COLUMNS.index("app_id")] = None
        execute(insert, params)
    commit()


def _expected(app: str, statuses: set[RunStatus] | None, limit: int) -> list[str]:
    mine = [
        r for r in _runs()
        if (r.app_id or r.workflow_name) == app and (statuses is None or r.status in statuses)
    ]  # fmt: skip
    mine.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
    return [r.run_id for r in mine[:limit]]


def _sqlite_plan(path: Path, sql: str, params: list[Any]) -> str:
    with sqlite3.connect(path) as conn:
        return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def _pg_plan(dsn: str, sql: str, params: list[Any]) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
        found = conn.execute("EXPLAIN " + S.to_format_params(sql), params).fetchall()
        return " | ".join(r[0].strip() for r in found)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_8_lists_an_apps_runs_from_the_index(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: Checkpointer
    if kind == "sqlite":
        path = tmp_path / "old.db"
        conn = sqlite3.connect(path)
        try:
            _old_database(conn.execute, "?", conn.commit)
        finally:
            conn.close()
        store = SqliteCheckpointer(path)
    else:
        import psycopg

        from oncegraph.storage.checkpointer import PgCheckpointer

        dsn = str(request.getfixturevalue("fresh_dsn"))
        with psycopg.connect(dsn, autocommit=True) as pg:
            _old_database(lambda q, p=None: pg.execute(q.replace("?", "%s"), p), "%s", pg.commit)
        store = PgCheckpointer(dsn)
    try:
        await store.setup()  # migrates
        for app, statuses, limit in [
            ("a", None, 100),
            ("a", None, 3),
            ("b", {RunStatus.FAILED}, 100),
            ("a", {RunStatus.COMPLETED, RunStatus.FAILED}, 4),
        ]:
            listed = await store.list_runs(
                app_id=app, statuses=sorted(statuses) if statuses else None, limit=limit
            )
            assert [r.run_id for r in listed] == _expected(app, statuses, limit)
        assert "run-legacy" in [r.run_id for r in await store.list_runs(app_id="a")]
    finally:
        await store.aclose()

    for n_statuses in (0, 1):
        sql = S.run_list(by_thread=False, n_statuses=n_statuses, by_app=True)
        params: list[Any] = ["completed"] * n_statuses + ["a", 20]
        if kind == "sqlite":
            plan = _sqlite_plan(path, sql, params)
            assert "USING INDEX oncegraph_runs_app" in plan and "TEMP B-TREE" not in plan, plan
        else:
            plan = _pg_plan(dsn, sql, params)
            assert "Index Scan Backward using oncegraph_runs_app" in plan, plan
            assert "Sort" not in plan, plan

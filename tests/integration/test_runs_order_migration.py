"""Schema migration 8: a thread's runs are read newest first from an index in that order.

Starting a run reads its thread's latest run. The index was (thread_id, run_id), so that
read took every run of the thread and sorted them; it is now (thread_id, created_at,
run_id). Migration 5's (app_id, status, created_at), which no statement could use (runs
are listed where ``COALESCE(app_id, workflow_name)`` is the app), is dropped. A database
at version 7 migrates with every run read as before, and both planners then read a
thread's latest run and its runs newest first from the index, without a sort.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from old_schema import Execute, app_runs, insert_runs, old_store

from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import statements as S


def _runs() -> list[RunRecord]:
    """Runs of apps ``a`` and ``b``; ``legacy`` has no app_id, so it is ``a``'s (its
    workflow_name)."""
    made = app_runs(12)
    legacy = RunRecord(
        "run-legacy", "t-old", RunStatus.COMPLETED, workflow_name="a",
        created_at=50.0, updated_at=50.0,
    )  # fmt: skip
    # one chat thread with several runs: the newest by created_at has the smallest id
    chat = [
        RunRecord(
            run_id,
            "t-chat",
            RunStatus.COMPLETED,
            workflow_name="a",
            created_at=at,
            updated_at=at,
            app_id="a",
        )
        for run_id, at in [("run-c3", 200.0), ("run-c1", 300.0), ("run-c2", 250.0)]
    ]
    return [*made, legacy, *chat]


def _fill(execute: Execute) -> None:
    """``_runs()``, the legacy run's app_id left NULL as before migration 5."""
    insert_runs(execute, _runs(), no_app_id={"run-legacy"})


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
    """``sql`` with ``%s`` placeholders (PostgreSQL's)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
        found = conn.execute("EXPLAIN " + sql, params).fetchall()
        return " | ".join(r[0].strip() for r in found)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_8_reads_a_threads_runs_newest_first_from_the_index(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, store = old_store(kind, tmp_path, request, version=7, fill=_fill)
    path, dsn = Path(where), where
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
        thread, latest = await store.open_thread("t-chat")  # what starting a run reads
        assert thread is None and latest is not None and latest.run_id == "run-c1"
        by_thread = await store.list_runs(thread_id="t-chat")
        assert [r.run_id for r in by_thread] == ["run-c1", "run-c2", "run-c3"]
    finally:
        await store.aclose()
    if kind == "sqlite":
        with sqlite3.connect(path) as conn:
            indexes = {r[1] for r in conn.execute("PRAGMA index_list(oncegraph_runs)")}
    else:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as pg:
            found = pg.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'oncegraph_runs'"
            ).fetchall()
            indexes = {r[0] for r in found}
    # migration 15 replaced this index by one in the order the database placed the runs
    assert "oncegraph_runs_thread_seq" in indexes and "oncegraph_runs_app" not in indexes

    reads: list[tuple[str, list[Any]]] = [
        (S.THREAD_OPENING, ["t-chat", "t-chat"]),
        (S.run_list(by_thread=True, n_statuses=0), ["t-chat", 20]),
    ]
    for sql, params in reads:
        if kind == "sqlite":
            plan = _sqlite_plan(path, sql, params)
            assert "INDEX oncegraph_runs_thread" in plan and "TEMP B-TREE" not in plan, plan
        else:
            plan = _pg_plan(dsn, S.to_format_params(sql), params)
            assert re.search("Index (Only )?Scan Backward using oncegraph_runs_thread", plan)
            assert "Sort" not in plan, plan
    if kind == "postgres":  # runs starting together read their threads in one statement
        from oncegraph.storage.sql.postgres import THREAD_OPENINGS

        plan = _pg_plan(dsn, THREAD_OPENINGS, [["t-chat", "t-old"]])
        assert re.search("Index (Only )?Scan Backward using oncegraph_runs_thread", plan), plan

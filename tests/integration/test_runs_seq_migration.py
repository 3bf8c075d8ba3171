"""Schema migration 15: a run's place in its thread is the database's, not a clock's.

A database at version 14 ordered a thread's runs by ``created_at`` (the submitting
process's clock). It migrates with every existing run numbered in that order, so the
thread reads as before; a run stored afterwards is placed after every earlier one,
whatever the clock of the process that wrote its ``created_at``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from old_schema import Execute, insert_runs, old_store

from oncegraph.storage.records import RunRecord, RunStatus


def _run(run_id: str, thread_id: str, at: float, status: RunStatus) -> RunRecord:
    return RunRecord(
        run_id, thread_id, status, workflow_name="a", created_at=at, updated_at=at, app_id="a"
    )


# stored in this order; by created_at the chat thread reads c1 (300), c2 (250), c3 (200)
_OLD = [
    _run("run-c3", "t-chat", 200.0, RunStatus.COMPLETED),
    _run("run-c1", "t-chat", 300.0, RunStatus.COMPLETED),
    _run("run-o1", "t-other", 100.0, RunStatus.COMPLETED),
    _run("run-c2", "t-chat", 250.0, RunStatus.COMPLETED),
]


def _fill(execute: Execute) -> None:
    insert_runs(execute, _OLD)


def _seqs(kind: str, where: str) -> dict[str, Any]:
    sql = "SELECT run_id, seq FROM oncegraph_runs"
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            return dict(conn.execute(sql).fetchall())
    import psycopg

    with psycopg.connect(where, autocommit=True) as pg:
        return dict(pg.execute(sql).fetchall())


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_15_numbers_old_runs_in_their_order_and_places_new_ones_last(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, store = old_store(kind, tmp_path, request, version=14, fill=_fill)
    try:
        await store.setup()  # migrates
        seq = _seqs(kind, where)
        assert seq["run-c3"] < seq["run-c2"] < seq["run-c1"], seq  # today's order, kept
        listed = await store.list_runs(thread_id="t-chat")
        assert [r.run_id for r in listed] == ["run-c1", "run-c2", "run-c3"]

        # a submitter an hour behind, then one a day ahead, then one behind again
        for n, at in enumerate((300.0 - 3600.0, 300.0 + 86_400.0, 1.0)):
            run = _run(f"run-new{n}", "t-chat", at, RunStatus.QUEUED)
            await store.create_run(run)
            _, latest = await store.open_thread("t-chat")  # type: ignore[attr-defined]
            assert latest is not None and latest.run_id == run.run_id
        listed = await store.list_runs(thread_id="t-chat")
        assert [r.run_id for r in listed] == [
            "run-new2", "run-new1", "run-new0", "run-c1", "run-c2", "run-c3",
        ]  # fmt: skip
        seq = _seqs(kind, where)
        assert seq["run-c1"] < seq["run-new0"] < seq["run-new1"] < seq["run-new2"], seq
        assert all(v is not None for v in seq.values()), seq
    finally:
        await store.aclose()

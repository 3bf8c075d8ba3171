"""Schema migration 10: a worker's claim walks the queued runs and the expired leases apart.

Migration 6's ``oncegraph_runs_claimable`` held the queued and the running runs of an app
in queue order, so a claim walked past every running run before the first queued one.
PostgreSQL now has ``oncegraph_runs_queued`` (the queued runs, in queue order) and
``oncegraph_runs_leases`` (the running runs by lease expiry) instead; SQLite, which has
no claim, only drops the index nothing reads. A database at version 9 with runs queued,
running and expired migrates, and the claim then takes them in queue order.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from old_schema import Execute, insert_runs, old_store

from oncegraph.storage.records import RunRecord, RunStatus

_FP = "sha256:test-graph"


def _runs() -> list[RunRecord]:
    """Six runs of app ``a`` on their own threads, oldest first: queued, running (a live
    lease), queued, running (a lease that expired), queued, and one of app ``b``."""
    statuses = ["queued", "live", "queued", "expired", "queued"]
    made = []
    for i, kind in enumerate(statuses):
        running = kind in ("live", "expired")
        made.append(
            RunRecord(
                f"run-{i}",
                f"t{i}",
                RunStatus.RUNNING if running else RunStatus.QUEUED,
                workflow_name="a",
                graph_fingerprint=_FP,
                created_at=100.0 + i,
                updated_at=100.0 + i,
                app_id="a",
                lease_owner="gone" if running else None,
                lease_expires_at=(1.0 if kind == "expired" else 4e9) if running else None,
                fencing_token=1 if running else 0,
            )
        )
    other = RunRecord(
        "run-b", "t-b", RunStatus.QUEUED, workflow_name="b", graph_fingerprint=_FP,
        created_at=50.0, updated_at=50.0, app_id="b",
    )  # fmt: skip
    return [*made, other]


def _fill(execute: Execute) -> None:
    insert_runs(execute, _runs())


def _indexes_sqlite(path: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[1] for r in conn.execute("PRAGMA index_list(oncegraph_runs)")}


async def test_migration_10_drops_the_unread_claim_index_on_sqlite(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, store = old_store("sqlite", tmp_path, request, version=9, fill=_fill)
    assert "oncegraph_runs_claimable" in _indexes_sqlite(where)
    try:
        await store.setup()  # migrates
        listed = await store.list_runs(app_id="a", statuses=[RunStatus.QUEUED])
        assert [r.run_id for r in listed] == ["run-4", "run-2", "run-0"]
    finally:
        await store.aclose()
    indexes = _indexes_sqlite(where)
    assert "oncegraph_runs_claimable" not in indexes
    assert not {"oncegraph_runs_queued", "oncegraph_runs_leases"} & indexes


@pytest.mark.postgres
async def test_migration_10_claims_queued_runs_and_expired_leases_in_queue_order(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import psycopg

    from oncegraph.storage.sql.postgres import PgCheckpointer
    from oncegraph.worker.queue import Runnable, RunQueue

    where, store = old_store("postgres", tmp_path, request, version=9, fill=_fill)
    assert isinstance(store, PgCheckpointer)
    try:
        await store.setup()  # migrates
        queue = RunQueue(store, Runnable("a", (_FP,)))
        taken = [await queue.claim_runs("w", 30, 1) for _ in range(4)]
        assert [[c.run.run_id for c in t] for t in taken] == [
            ["run-0"], ["run-2"], ["run-3"], ["run-4"]
        ]
        assert taken[2][0].taken_from == "gone" and taken[2][0].run.fencing_token == 2
        assert await queue.claim("w", 30, 5) == []  # run-1's lease is live; run-b is b's
    finally:
        await store.aclose()
    with psycopg.connect(where, autocommit=True) as pg:
        found = pg.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'oncegraph_runs'"
        ).fetchall()
    indexes = {r[0] for r in found}
    assert {"oncegraph_runs_queued", "oncegraph_runs_leases"} <= indexes
    assert "oncegraph_runs_claimable" not in indexes

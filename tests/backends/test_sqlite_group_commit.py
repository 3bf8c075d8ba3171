"""Group commit on SQLite: step commits ready in the same turn of the loop share one
transaction, each checked on its own.

Commits started together (``asyncio.gather``) are written in one transaction: a lost
compare-and-swap, a lost fence or a duplicate row rolls back only that commit (its
checkpoint, log entries, folded effects and run status); the others are durable when
their ``commit`` returns, as a second connection shows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from group_refusals import check_answers, check_refused_wrote_nothing, heads, refusals

from oncegraph.errors import StorageError
from oncegraph.storage.records import AuditRecord, StepCommit
from oncegraph.storage.sql.sqlite import SqliteCheckpointer
from oncegraph.testing.conformance import make_checkpoint, start_thread


def _rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Read with a connection of its own: what is on disk, not in the store's session."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def test_concurrent_commits_share_a_transaction_and_conflicts_roll_back_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "group.db"
    store = SqliteCheckpointer(path)
    try:
        r = await refusals(store)
        before = store.commit_groups.stats.transactions
        results = await asyncio.gather(
            *(store.commit(s) for s in r.steps), return_exceptions=True
        )
        assert store.commit_groups.stats.transactions == before + 1  # one transaction, one fsync
        check_answers(results)
        # what the winners wrote is on disk (another connection sees it) ...
        assert _rows(path, "SELECT thread_id, version, head_checkpoint_id FROM oncegraph_threads "
                     "WHERE thread_id IN (?, ?, ?) ORDER BY thread_id", (r.x, r.y, r.z)) == heads(r)
        # ... and nothing of the refused steps: no checkpoint, log entry, effect or status
        await check_refused_wrote_nothing(store, r)
    finally:
        await store.aclose()


async def test_a_commit_alone_is_written_at_once_and_sequential_steps_chain(
    tmp_path: Path,
) -> None:
    store = SqliteCheckpointer(tmp_path / "one.db")
    try:
        tid, rid, cp = await start_thread(store)
        for version in range(2, 6):  # each awaited: groups of one, one after another
            nxt = make_checkpoint(tid, rid, version, parent=cp.checkpoint_id)
            await store.commit(StepCommit(thread_id=tid, expected_version=version - 1,
                                          checkpoint=nxt))
            cp = nxt
        assert (await store.get_thread(tid)).version == 5  # type: ignore[union-attr]
        assert store.commit_groups.stats.largest == 1
    finally:
        await store.aclose()


async def test_a_cancelled_commit_is_left_out_of_its_group(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "cancel.db")
    try:
        tid, rid, cp = await start_thread(store)
        nxt = make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id)
        task = asyncio.ensure_future(
            store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=nxt))
        )
        await asyncio.sleep(0)  # the request is queued, the group not yet written
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.01)
        assert (await store.get_thread(tid)).version == 1  # type: ignore[union-attr]
    finally:
        await store.aclose()



async def test_audit_appends_ride_the_group_of_a_step_commit_and_make_one_chain(
    tmp_path: Path,
) -> None:
    store = SqliteCheckpointer(tmp_path / "audit.db")
    try:
        tid, rid, cp = await start_thread(store)
        records = [
            AuditRecord(f"aud_{uuid.uuid4().hex}", "api:otto", "start", "run", rid, run_id=rid)
            for _ in range(4)
        ]
        step = StepCommit(
            thread_id=tid,
            expected_version=1,
            checkpoint=make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id),
        )
        before = store.commit_groups.stats.transactions
        duplicate = dataclasses.replace(records[0], reason="rewritten")
        results = await asyncio.gather(
            store.commit(step),
            *(store.append_audit(r) for r in records),
            store.append_audit(duplicate),  # the same audit id: refused alone
            return_exceptions=True,
        )
        # one group: its first transaction rolled back by the duplicate, then written again
        assert store.commit_groups.stats.transactions == before + 1
        assert isinstance(results[-1], StorageError)
        assert "already exists" in str(results[-1])
        assert results[1:-1] == [None] * 4
        assert (await store.get_thread(tid)).version == 2  # type: ignore[union-attr]
        got = _rows(tmp_path / "audit.db", "SELECT audit_id, reason FROM oncegraph_audit")
        assert sorted(got) == sorted((r.audit_id, None) for r in records)
        report = await store.verify_audit()
        assert report.ok, report.describe()
        assert report.records == 4
    finally:
        await store.aclose()

"""Group commit on SQLite: step commits ready in the same turn of the loop share one
transaction, each checked on its own.

Commits started together (``asyncio.gather``) are written in one transaction: a lost
compare-and-swap, a lost fence or a duplicate row rolls back only that commit (its
checkpoint, log entries, folded effects and run status); the others are durable when
their ``commit`` returns, as a second connection shows.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from group_refusals import check_answers, check_refused_wrote_nothing, heads, refusals

from oncegraph.storage.records import StepCommit
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


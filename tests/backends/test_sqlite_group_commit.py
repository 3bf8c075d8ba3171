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
from pathlib import Path
from typing import Any

import pytest

from oncegraph.errors import LeaseLostError, StaleStateError, StorageError
from oncegraph.storage.records import EffectStatus, LogEntry, RunStatus, StepCommit
from oncegraph.storage.sql.sqlite import SqliteCheckpointer
from oncegraph.testing.conformance import make_checkpoint, make_effect, start_thread


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
        x, run_x, x1 = await start_thread(store)
        y, run_y, y1 = await start_thread(store)
        z, run_z, z1 = await start_thread(store)
        await store.fence_run(run_z, expected_token=0, owner="me")  # z's token is 1 now

        def step(thread: str, run: str, parent: str, expected: int, **more: Any) -> StepCommit:
            cp = make_checkpoint(thread, run, expected + 1, parent=parent)
            return StepCommit(thread_id=thread, expected_version=expected, checkpoint=cp, **more)

        x_wins = step(
            x, run_x, x1.checkpoint_id, 1,
            log=[LogEntry("messages", 0, {"role": "ai", "content": "x wins"})],
        )
        lost_effect = make_effect(run_x, x, status=EffectStatus.COMPLETED)
        x_loses = step(  # same thread, same expected version, behind x_wins in the group
            x, run_x, x1.checkpoint_id, 1,
            log=[LogEntry("messages", 0, {"role": "ai", "content": "x loses"})],
            effects=[lost_effect],
            run_status=RunStatus.COMPLETED,
        )
        y_ok = step(y, run_y, y1.checkpoint_id, 1, run_status=RunStatus.COMPLETED)
        z_fenced_out = step(z, run_z, z1.checkpoint_id, 1, fence=0)  # the token moved on
        # x's next step (its CAS passes: x_wins is before it in the group) reusing x_wins'
        # checkpoint id: its insert fails after its thread update, and both roll back
        duplicate = StepCommit(
            thread_id=x,
            expected_version=2,
            checkpoint=dataclasses.replace(
                make_checkpoint(x, run_x, 3, parent=x_wins.checkpoint.checkpoint_id),
                checkpoint_id=x_wins.checkpoint.checkpoint_id,
            ),
        )
        before = store.commit_groups.stats.transactions
        results = await asyncio.gather(
            store.commit(x_wins),
            store.commit(x_loses),
            store.commit(y_ok),
            store.commit(z_fenced_out),
            store.commit(duplicate),
            return_exceptions=True,
        )
        assert store.commit_groups.stats.transactions == before + 1  # one transaction, one fsync
        assert results[0] == 0 and results[2] == 0  # committed (no planned intents)
        assert isinstance(results[1], StaleStateError)
        assert isinstance(results[3], LeaseLostError)
        assert isinstance(results[4], StorageError) and "nothing was written" in str(results[4])

        # what the winners wrote is on disk (another connection sees it) ...
        assert _rows(path, "SELECT thread_id, version, head_checkpoint_id FROM oncegraph_threads "
                     "WHERE thread_id IN (?, ?, ?) ORDER BY thread_id", (x, y, z)) == sorted(
            [(x, 2, x_wins.checkpoint.checkpoint_id), (y, 2, y_ok.checkpoint.checkpoint_id),
             (z, 1, z1.checkpoint_id)]
        )
        assert await store.read_log(x, "messages", 10) == [{"role": "ai", "content": "x wins"}]
        assert (await store.get_run(run_y)).status is RunStatus.COMPLETED  # type: ignore[union-attr]
        # ... and nothing of the losers: no checkpoint, log entry, effect or status
        ids = [c.checkpoint_id for c in await store.list_checkpoints(x)]
        assert x_loses.checkpoint.checkpoint_id not in ids
        assert await store.get_effect(lost_effect.effect_id) is None
        assert (await store.get_run(run_x)).status is RunStatus.RUNNING  # type: ignore[union-attr]
        assert z_fenced_out.checkpoint.checkpoint_id not in [
            c.checkpoint_id for c in await store.list_checkpoints(z)
        ]
        assert (await store.get_thread(x)).version == 2  # type: ignore[union-attr]
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


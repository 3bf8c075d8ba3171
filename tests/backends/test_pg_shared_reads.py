"""Shared reads on PostgreSQL: runs of one loop that start together read their threads in
one statement, and each gets exactly what it would have read alone.

Of reads started together (``asyncio.gather``) the first goes alone at once; the others,
asked while it is in flight, go as one statement over their distinct keys.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import make_run, start_thread

pytestmark = pytest.mark.postgres


async def test_threads_read_together_answer_what_each_reads_alone(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn)
    try:
        two_runs, _, _ = await start_thread(store)
        later = make_run(two_runs, created_at=2_000.0)
        await store.create_run(later)
        one_run, _, _ = await start_thread(store)
        keys = [two_runs, one_run, "no-such-thread", two_runs, one_run, "no-such-thread"]
        alone = [await store._open_thread_alone(k) for k in keys]
        assert alone[0][1] is not None and alone[0][1].run_id == later.run_id
        assert alone[2] == (None, None)

        before = dataclasses.replace(store.thread_reads.stats)
        together = await asyncio.gather(*(store.open_thread(k) for k in keys))

        assert together == alone
        stats = store.thread_reads.stats
        assert stats.statements == before.statements + 2, "the first alone, then the rest"
        assert stats.reads == before.reads + len(keys)
        assert stats.largest == 3, "the five that waited name three threads"
    finally:
        await store.aclose()


async def test_a_read_that_waited_sees_the_commits_made_before_it_was_asked(
    fresh_dsn: str,
) -> None:
    store = PgCheckpointer(fresh_dsn)
    other = PgCheckpointer(fresh_dsn)  # another process's store, on its own connections
    try:
        await store.setup()
        first = asyncio.ensure_future(store.open_thread("first"))
        await asyncio.sleep(0)  # the first read is in flight, alone
        thread_id, run_id, _ = await start_thread(other)
        thread, latest = await store.open_thread(thread_id)  # waits for the first
        assert await first == (None, None)
        assert thread is not None and thread.version == 1
        assert latest is not None and latest.run_id == run_id
    finally:
        await other.aclose()
        await store.aclose()


async def test_a_closed_store_ends_its_shared_reads_first(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn)
    made = [await start_thread(store) for _ in range(4)]
    reads = asyncio.gather(*(store.open_thread(t) for t, _, _ in made))
    await asyncio.sleep(0)
    await store.aclose()  # drains the shared read in flight before the pool goes
    answers = await reads
    assert [thread.thread_id for thread, _ in answers if thread] == [t for t, _, _ in made]
    assert store._pools.peek() is None, "no read opened a pool after the close"

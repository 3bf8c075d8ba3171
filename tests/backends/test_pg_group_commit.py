"""Group commit on PostgreSQL: steps that come while their loop has a commit in flight
go together in one message, one transaction; a conflict sends them again one by one.

Of commits started together (``asyncio.gather``) the first goes alone at once, and the
others, which come while it is in flight, are written by ONE transaction (their rows
share one ``xmin``, as another connection reads it). When one of them is refused (a lost
compare-and-swap, a lost fence, a duplicate row) nothing of the group was committed, and
each step is sent again on its own: the refused one gets its own error and writes
nothing, the others are durable when their ``commit`` returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
import pytest
from group_refusals import check_answers, check_refused_wrote_nothing, heads, refusals, step

from oncegraph.storage.records import LogEntry, StepCommit
from oncegraph.storage.sql import pg_group
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import start_thread

pytestmark = pytest.mark.postgres


def _rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Read with a connection of its own: what is committed, not the store's session."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _versions(dsn: str, threads: list[str]) -> list[int]:
    rows = _rows(dsn, "SELECT version FROM oncegraph_threads WHERE thread_id = ANY(%s)", (threads,))
    return sorted(v for (v,) in rows)


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_steps_that_wait_for_a_commit_in_flight_are_one_transaction(
    fresh_dsn: str, prepared: bool
) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn, prepared_statements=prepared)
        try:
            started = [await start_thread(store) for _ in range(7)]
            steps = [
                step(t, r, cp.checkpoint_id, 1, log=[LogEntry("messages", 0, {"n": i})])
                for i, (t, r, cp) in enumerate(started)
            ]
            before = dataclasses.replace(store.commit_groups.stats)
            assert await asyncio.gather(*(store.commit(s) for s in steps)) == [0] * 7
            stats = store.commit_groups.stats
            assert stats.groups == before.groups + 2, "the first alone, then the other six"
            assert stats.largest >= 6 and stats.retried == before.retried
            xmins = _rows(
                fresh_dsn,
                "SELECT checkpoint_id, xmin::text FROM oncegraph_checkpoints "
                "WHERE checkpoint_id = ANY(%s)",
                ([s.checkpoint.checkpoint_id for s in steps],),
            )
            by_id = dict(xmins)
            first, rest = steps[0].checkpoint.checkpoint_id, steps[1:]
            assert len({by_id[s.checkpoint.checkpoint_id] for s in rest}) == 1, (
                "the six steps that waited are one transaction"
            )
            assert by_id[first] != by_id[rest[0].checkpoint.checkpoint_id]
            assert _versions(fresh_dsn, [t for t, _, _ in started]) == [2] * 7
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_refused_step_rolls_back_alone_and_the_others_commit(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            w, run_w, w1 = await start_thread(store)  # goes alone, first
            r = await refusals(store)
            before = dataclasses.replace(store.commit_groups.stats)
            results = await asyncio.gather(
                store.commit(step(w, run_w, w1.checkpoint_id, 1)),
                *(store.commit(s) for s in r.steps),
                return_exceptions=True,
            )
            stats = store.commit_groups.stats
            assert stats.groups == before.groups + 2, "w alone, the five as one group"
            assert stats.retried == before.retried + 1, "sent again one by one"
            assert results[0] == 0, "w"
            check_answers(results[1:])
            assert "already exists" in str(results[5])
            assert sorted(
                _rows(
                    fresh_dsn,
                    "SELECT thread_id, version, head_checkpoint_id FROM oncegraph_threads "
                    "WHERE thread_id = ANY(%s)",
                    ([r.x, r.y, r.z],),
                )
            ) == heads(r)
            await check_refused_wrote_nothing(store, r)
        finally:
            await store.aclose()

    asyncio.run(go())


def test_never_more_than_in_flight_messages_and_each_step_once(fresh_dsn: str) -> None:
    """64 steps asked for over several turns of the loop: never more than IN_FLIGHT
    commit messages of the loop at once, steps went together, each committed once."""

    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            started = [await start_thread(store) for _ in range(64)]
            in_flight: list[int] = []
            groups = store.commit_groups
            write, write_one = groups._write, groups._write_one  # watch both paths

            async def watched(items: list[pg_group.Pending]) -> None:
                in_flight.append(len(items))
                try:
                    assert len(in_flight) <= pg_group.IN_FLIGHT
                    await write(items)
                finally:
                    in_flight.remove(len(items))

            async def watched_one(commit: StepCommit, ts: float) -> int:
                in_flight.append(1)
                try:
                    assert len(in_flight) <= pg_group.IN_FLIGHT
                    return await write_one(commit, ts)
                finally:
                    in_flight.remove(1)

            groups._write, groups._write_one = watched, watched_one

            async def one(i: int) -> int:
                await asyncio.sleep(0.0005 * (i % 8))  # spread over several loop turns
                t, r, cp = started[i]
                return await store.commit(step(t, r, cp.checkpoint_id, 1))

            before = dataclasses.replace(groups.stats)
            assert await asyncio.gather(*(one(i) for i in range(64))) == [0] * 64
            assert groups.stats.requests - before.requests == 64
            assert groups.stats.groups - before.groups < 64, "steps went together"
            assert _versions(fresh_dsn, [t for t, _, _ in started]) == [2] * 64
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_cancelled_commit_is_left_out_of_its_group(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            other, orun, ocp = await start_thread(store)
            tid, rid, cp = await start_thread(store)
            alone = asyncio.ensure_future(store.commit(step(other, orun, ocp.checkpoint_id, 1)))
            waiting = asyncio.ensure_future(store.commit(step(tid, rid, cp.checkpoint_id, 1)))
            await asyncio.sleep(0)  # the first is in flight, the second in the open group
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await alone == 0
            await store.commit_groups.drain()
            thread = await store.get_thread(tid)
            assert thread is not None and thread.version == 1, "never sent"
            thread = await store.get_thread(other)
            assert thread is not None and thread.version == 2
        finally:
            await store.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_arguments_are_quoted_literals_that_round_trip(fresh_dsn: str, prepared: bool) -> None:
    """The message quotes each argument itself (psycopg's ``as_literal``): text holding
    quotes, percent signs, question marks, backslashes and non-ASCII reads back as is."""
    awkward = "it's 100% done? C:\\path\\%s ?? $1 -- é 漢 \U0001f600 ';DROP TABLE x;--"

    async def go() -> None:
        store = PgCheckpointer(fresh_dsn, prepared_statements=prepared)
        try:
            started = [await start_thread(store) for _ in range(3)]
            steps = [
                step(t, r, cp.checkpoint_id, 1,
                      log=[LogEntry("messages", 0, {"content": awkward, "i": i})])
                for i, (t, r, cp) in enumerate(started)
            ]
            assert await asyncio.gather(*(store.commit(s) for s in steps)) == [0] * 3
            for i, (t, _, _) in enumerate(started):
                assert await store.read_log(t, "messages", 10) == [{"content": awkward, "i": i}]
        finally:
            await store.aclose()

    asyncio.run(go())

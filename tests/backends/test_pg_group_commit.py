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

from oncegraph.errors import LeaseLostError, StaleStateError, StorageError
from oncegraph.storage.records import EffectStatus, LogEntry, RunStatus, StepCommit
from oncegraph.storage.sql import pg_group
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import make_checkpoint, make_effect, start_thread

pytestmark = pytest.mark.postgres


def _rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Read with a connection of its own: what is committed, not the store's session."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def _step(thread: str, run: str, parent: str, expected: int, **more: Any) -> StepCommit:
    cp = make_checkpoint(thread, run, expected + 1, parent=parent)
    return StepCommit(thread_id=thread, expected_version=expected, checkpoint=cp, **more)


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_steps_that_wait_for_a_commit_in_flight_are_one_transaction(
    fresh_dsn: str, prepared: bool
) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn, prepared_statements=prepared)
        try:
            started = [await start_thread(store) for _ in range(7)]
            steps = [
                _step(t, r, cp.checkpoint_id, 1, log=[LogEntry("messages", 0, {"n": i})])
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
            versions = _rows(
                fresh_dsn,
                "SELECT version FROM oncegraph_threads WHERE thread_id = ANY(%s)",
                ([t for t, _, _ in started],),
            )
            assert sorted(v for (v,) in versions) == [2] * 7
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_refused_step_rolls_back_alone_and_the_others_commit(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            w, run_w, w1 = await start_thread(store)  # goes alone, first
            x, run_x, x1 = await start_thread(store)
            y, run_y, y1 = await start_thread(store)
            z, run_z, z1 = await start_thread(store)
            await store.fence_run(run_z, expected_token=0, owner="me")  # z's token is 1

            x_wins = _step(
                x, run_x, x1.checkpoint_id, 1,
                log=[LogEntry("messages", 0, {"role": "ai", "content": "x wins"})],
            )
            lost_effect = make_effect(run_x, x, status=EffectStatus.COMPLETED)
            x_loses = _step(  # same thread, same expected version, behind x_wins
                x, run_x, x1.checkpoint_id, 1,
                log=[LogEntry("messages", 0, {"role": "ai", "content": "x loses"})],
                effects=[lost_effect],
                run_status=RunStatus.COMPLETED,
            )
            y_ok = _step(y, run_y, y1.checkpoint_id, 1, run_status=RunStatus.COMPLETED)
            z_fenced_out = _step(z, run_z, z1.checkpoint_id, 1, fence=0)  # token moved on
            # x's next step (its CAS passes after x_wins) reusing x_wins' checkpoint id:
            # its insert fails after its thread update, and both roll back
            duplicate = StepCommit(
                thread_id=x,
                expected_version=2,
                checkpoint=dataclasses.replace(
                    make_checkpoint(x, run_x, 3, parent=x_wins.checkpoint.checkpoint_id),
                    checkpoint_id=x_wins.checkpoint.checkpoint_id,
                ),
            )
            before = dataclasses.replace(store.commit_groups.stats)
            results = await asyncio.gather(
                store.commit(_step(w, run_w, w1.checkpoint_id, 1)),
                store.commit(x_wins),
                store.commit(x_loses),
                store.commit(y_ok),
                store.commit(z_fenced_out),
                store.commit(duplicate),
                return_exceptions=True,
            )
            stats = store.commit_groups.stats
            assert stats.groups == before.groups + 2, "w alone, the five as one group"
            assert stats.retried == before.retried + 1, "sent again one by one"
            assert results[0] == 0, "w"
            assert results[1] == 0 and results[3] == 0
            assert isinstance(results[2], StaleStateError)
            assert isinstance(results[4], LeaseLostError)
            assert isinstance(results[5], StorageError)
            assert "already exists; nothing was written" in str(results[5])

            assert sorted(
                _rows(
                    fresh_dsn,
                    "SELECT thread_id, version, head_checkpoint_id FROM oncegraph_threads "
                    "WHERE thread_id = ANY(%s)",
                    ([x, y, z],),
                )
            ) == sorted(
                [(x, 2, x_wins.checkpoint.checkpoint_id), (y, 2, y_ok.checkpoint.checkpoint_id),
                 (z, 1, z1.checkpoint_id)]
            )
            assert await store.read_log(x, "messages", 10) == [
                {"role": "ai", "content": "x wins"}
            ]
            run = await store.get_run(run_y)
            assert run is not None and run.status is RunStatus.COMPLETED
            # nothing of the refused steps: no checkpoint, log entry, effect or status
            ids = [c.checkpoint_id for c in await store.list_checkpoints(x)]
            assert x_loses.checkpoint.checkpoint_id not in ids
            assert await store.get_effect(lost_effect.effect_id) is None
            run = await store.get_run(run_x)
            assert run is not None and run.status is RunStatus.RUNNING
            assert z_fenced_out.checkpoint.checkpoint_id not in [
                c.checkpoint_id for c in await store.list_checkpoints(z)
            ]
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
                return await store.commit(_step(t, r, cp.checkpoint_id, 1))

            before = dataclasses.replace(groups.stats)
            assert await asyncio.gather(*(one(i) for i in range(64))) == [0] * 64
            assert groups.stats.requests - before.requests == 64
            assert groups.stats.groups - before.groups < 64, "steps went together"
            versions = _rows(
                fresh_dsn,
                "SELECT version FROM oncegraph_threads WHERE thread_id = ANY(%s)",
                ([t for t, _, _ in started],),
            )
            assert sorted(v for (v,) in versions) == [2] * 64
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_cancelled_commit_is_left_out_of_its_group(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            other, orun, ocp = await start_thread(store)
            tid, rid, cp = await start_thread(store)
            alone = asyncio.ensure_future(store.commit(_step(other, orun, ocp.checkpoint_id, 1)))
            waiting = asyncio.ensure_future(store.commit(_step(tid, rid, cp.checkpoint_id, 1)))
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
                _step(t, r, cp.checkpoint_id, 1,
                      log=[LogEntry("messages", 0, {"content": awkward, "i": i})])
                for i, (t, r, cp) in enumerate(started)
            ]
            assert await asyncio.gather(*(store.commit(s) for s in steps)) == [0] * 3
            for i, (t, _, _) in enumerate(started):
                assert await store.read_log(t, "messages", 10) == [{"content": awkward, "i": i}]
        finally:
            await store.aclose()

    asyncio.run(go())

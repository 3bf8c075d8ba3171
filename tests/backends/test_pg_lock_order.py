"""A worker's lease renewal and a group commit lock run rows in one order: run id.

Both touch several run rows in one transaction: the renewal (``RENEW_MANY``) every run
the worker holds, the group commit the runs of the steps it sends together. Taken in
different orders, the two deadlocked (PostgreSQL aborted one of them). Each test below
holds a row lock from a connection of its own, waits until the statement under test is
blocked on it (``pg_stat_activity``), and then looks at which rows that statement has
locked: none after the blocked one, whatever order the runs were asked in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from group_refusals import step

from oncegraph.storage.records import RunStatus
from oncegraph.storage.sql.pg_step import StepWriter
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import start_thread

pytestmark = pytest.mark.postgres

_LOCK_ROW = "SELECT 1 FROM oncegraph_runs WHERE run_id = %s FOR UPDATE"
_LOCK_THREAD = "SELECT 1 FROM oncegraph_threads WHERE thread_id = %s FOR UPDATE"
_WAITING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def _held_runs(store: PgCheckpointer, owner: str) -> list[tuple[str, str]]:
    """Two threads whose runs ``owner`` holds (running, token 1): ``(thread, run)`` each,
    the smaller run id first."""
    started = sorted([(r, t) for t, r, _ in [await start_thread(store) for _ in range(2)]])
    async with await psycopg.AsyncConnection.connect(
        store.session_conninfo(), autocommit=True
    ) as c:
        await c.execute(
            "UPDATE oncegraph_runs SET status = 'running', lease_owner = %s, "
            "fencing_token = 1 WHERE run_id = ANY(%s)",
            (owner, [r for r, _ in started]),
        )
    return [(t, r) for r, t in started]


async def _until_waiting(dsn: str, count: int, *, done: asyncio.Future[Any] | None = None) -> None:
    """Wait until ``count`` sessions of the database wait for a lock (or ``done`` is)."""
    deadline = time.monotonic() + 20
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        while time.monotonic() < deadline:
            row = await (await c.execute(_WAITING)).fetchone()
            if (row is not None and row[0] >= count) or (done is not None and done.done()):
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{count} session(s) never waited for a lock")


async def _free(holder: psycopg.AsyncConnection[Any], run_id: str) -> bool:
    """Whether ``holder`` can lock ``run_id``'s row at once (no one else has it)."""
    try:
        async with holder.transaction(force_rollback=True):
            await holder.execute(_LOCK_ROW + " NOWAIT", (run_id,))
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def test_a_renewal_locks_its_runs_in_run_id_order(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            (_, lo), (_, hi) = await _held_runs(store, "w")
            queue = store.run_queue()
            async with await psycopg.AsyncConnection.connect(fresh_dsn) as holder:
                await holder.execute(_LOCK_ROW, (lo,))
                # asked larger id first: the renewal still waits for ``lo`` first
                renewal = asyncio.ensure_future(queue.renew_many("w", {hi: 1, lo: 1}, 30))
                await _until_waiting(fresh_dsn, 1)
                async with await psycopg.AsyncConnection.connect(fresh_dsn) as other:
                    assert await _free(other, hi), "the renewal locked hi before lo"
                await holder.rollback()
            assert await renewal == {lo, hi}
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_group_commit_locks_its_runs_in_run_id_order(fresh_dsn: str) -> None:
    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            (t_lo, lo), (t_hi, hi) = await _held_runs(store, "w")
            heads = {t: (await store.get_thread(t)) for t in (t_lo, t_hi)}  # version 1 each
            steps = [
                step(t, r, heads[t].head_checkpoint_id, 1, run_status=RunStatus.RUNNING, fence=1)
                for t, r in ((t_hi, hi), (t_lo, lo))  # asked larger id first
            ]
            writer = StepWriter()
            conn = await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True)
            async with conn, await psycopg.AsyncConnection.connect(fresh_dsn) as holder:
                await holder.execute(_LOCK_ROW, (lo,))
                group = asyncio.ensure_future(
                    writer.send_many(conn, [(s, time.time()) for s in steps])
                )
                await _until_waiting(fresh_dsn, 1)
                async with await psycopg.AsyncConnection.connect(fresh_dsn) as other:
                    assert await _free(other, hi), "the group locked hi before lo"
                await holder.rollback()
                assert await group == [0, 0]
            for t in (t_lo, t_hi):
                thread = await store.get_thread(t)
                assert thread is not None and thread.version == 2
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_renewal_and_a_group_commit_of_the_same_runs_do_not_deadlock(fresh_dsn: str) -> None:
    """The interleaving that deadlocked: the group has begun (its first step's thread is
    held up by a third session) when the renewal comes. In request order the group held
    ``hi``'s row, the renewal then took ``lo``'s and waited for ``hi``, and the group,
    let go, waited for ``lo``. In run-id order the group has locked no run row yet; the
    renewal takes both and ends, then the group goes."""

    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            (t_lo, lo), (t_hi, hi) = await _held_runs(store, "w")
            heads = {t: (await store.get_thread(t)) for t in (t_lo, t_hi)}
            steps = [
                step(t, r, heads[t].head_checkpoint_id, 1, run_status=RunStatus.RUNNING, fence=1)
                for t, r in ((t_hi, hi), (t_lo, lo))
            ]
            queue = store.run_queue()
            writer = StepWriter()
            conn = await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True)
            async with conn, await psycopg.AsyncConnection.connect(fresh_dsn) as holder:
                await holder.execute(_LOCK_THREAD, (t_lo,))
                group = asyncio.ensure_future(
                    writer.send_many(conn, [(s, time.time()) for s in steps])
                )
                await _until_waiting(fresh_dsn, 1)
                renewal = asyncio.ensure_future(queue.renew_many("w", {lo: 1, hi: 1}, 30))
                await _until_waiting(fresh_dsn, 2, done=renewal)
                await holder.rollback()
                got = await asyncio.gather(renewal, group, return_exceptions=True)
            assert got == [{lo, hi}, [0, 0]]
        finally:
            await store.aclose()

    asyncio.run(go())


async def _renewed_while_held(
    store: PgCheckpointer, held: dict[str, int], run_id: str, change: str
) -> set[str]:
    """Renew ``held`` while another connection holds ``run_id``'s row, and let that
    connection run ``change`` (on the run, ``%s`` its id) and commit once the renewal
    waits for it: what the renewal says is still ours."""
    dsn = store.session_conninfo()
    async with await psycopg.AsyncConnection.connect(dsn) as holder:
        await holder.execute(_LOCK_ROW, (run_id,))
        renewal = asyncio.ensure_future(store.run_queue().renew_many("w", held, 30))
        await _until_waiting(dsn, 1)
        await holder.execute(change, (run_id,))
        await holder.commit()
    return await renewal


def test_a_run_that_ends_while_its_renewal_waits_for_it_is_still_ours(fresh_dsn: str) -> None:
    """The run's last commit holds its row when the renewal comes; the renewal waits, and
    the commit ends the run under the same token: the run was not taken, so the renewal
    says it is still ours (a worker that heard otherwise cancelled a finished run's task
    and logged that another worker held it)."""

    async def go() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            (_, lo), (_, hi) = await _held_runs(store, "w")
            ended = await _renewed_while_held(
                store,
                {lo: 1, hi: 1},
                lo,
                "UPDATE oncegraph_runs SET status = 'completed', lease_owner = NULL, "
                "lease_expires_at = NULL WHERE run_id = %s",
            )
            assert ended == {lo, hi}
            # taken meanwhile (its token moved on): not ours, however the renewal waited
            taken = await _renewed_while_held(
                store,
                {hi: 1},
                hi,
                "UPDATE oncegraph_runs SET lease_owner = 'x', fencing_token = 2 WHERE run_id = %s",
            )
            assert taken == set()
        finally:
            await store.aclose()

    asyncio.run(go())

"""PostgreSQL run locks: requests asked for together go in one statement, each answered
in order; a lock lives on its loop's session and, handed over, outlives that loop.

A real lock session on a fresh database; a second session (or store) plays another
process.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from oncegraph.storage.sql.pg_locks import HELD_BY_OTHERS, TRY_LOCK, UNLOCK, LockSession
from oncegraph.storage.sql.postgres import PgCheckpointer


async def _open(dsn: str) -> LockSession:
    return await LockSession.open(dsn, connect_timeout=5, timeout=None)


async def _held_elsewhere(dsn: str, run_id: str) -> bool:
    """Can another session take ``run_id``'s lock? (It lets go at once.)"""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
        cur = await other.execute(TRY_LOCK, (run_id,))
        row = await cur.fetchone()
        if row and row[0]:
            await other.execute(UNLOCK, (run_id,))  # at once, not when the session ends
            return False
        return True


def test_many_locks_asked_at_once_are_each_answered(fresh_dsn: str) -> None:
    async def go() -> None:
        session = await _open(fresh_dsn)
        try:
            statements: list[str] = []
            real = session.conn.execute

            async def counting(query: object, *args: object, **kw: object) -> object:
                statements.append(str(query))
                return await real(query, *args, **kw)  # type: ignore[arg-type]

            session.conn.execute = counting  # type: ignore[method-assign]
            runs = [f"run_{i}" for i in range(64)]
            got = await asyncio.gather(*(session.try_lock(r) for r in runs))
            assert got == [True] * 64 and session.held == set(runs)
            assert len(statements) < 64, "the requests were batched"
            assert await _held_elsewhere(fresh_dsn, "run_7")
            # the same run asked twice at once: one holder, even in this process
            twice = await asyncio.gather(session.try_lock("dup"), session.try_lock("dup"))
            assert sorted(twice) == [False, True]
            # unlocked and locked again in one batch: the order of the requests holds
            await asyncio.gather(session.unlock("run_3"), session.try_lock("run_3"))
            assert "run_3" in session.held and await _held_elsewhere(fresh_dsn, "run_3")
            await asyncio.gather(*(session.unlock(r) for r in runs))
            assert not await _held_elsewhere(fresh_dsn, "run_7")
        finally:
            await session.aclose()

    asyncio.run(go())


def test_a_lock_whose_asker_gave_up_is_given_back(fresh_dsn: str) -> None:
    async def go() -> None:
        session = await _open(fresh_dsn)
        try:
            asking = asyncio.ensure_future(session.try_lock("gone"))
            await asyncio.sleep(0)  # queued and on its way
            asking.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asking
            for _ in range(1000):  # the batch is answered, then the lock given back
                if not session.busy:
                    break
                await asyncio.sleep(0.01)
            assert not session.busy and "gone" not in session.held
            assert not await _held_elsewhere(fresh_dsn, "gone")
            assert await session.try_lock("gone"), "and it can be taken again"
        finally:
            await session.aclose()

    asyncio.run(go())


def test_a_broken_session_fails_the_waiting_requests(fresh_dsn: str) -> None:
    async def go() -> None:
        session = await _open(fresh_dsn)
        try:
            session.conn.pgconn.finish()  # the connection is gone
            with pytest.raises(psycopg.Error):
                await session.try_lock("r1")
            assert session.broken
            await session.unlock("r1")  # nothing held: nothing to do, no error
        finally:
            await session.aclose()

    asyncio.run(go())


async def _claimable(dsn: str, run_id: str) -> bool:
    """Would a worker's claim query take ``run_id`` (no live session holds it)?"""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            f"SELECT NOT {HELD_BY_OTHERS} FROM (SELECT %s::text AS run_id) r", (run_id,)
        )
        row = await cur.fetchone()
        return bool(row and row[0])


def test_a_session_does_not_lock_a_run_another_session_keeps(fresh_dsn: str) -> None:
    async def go() -> None:
        keeper, taker = await _open(fresh_dsn), await _open(fresh_dsn)
        try:
            assert await keeper.try_lock("r")
            assert await keeper.keep("r") and "r" in keeper.kept
            await keeper.unlock("r")  # handed over: only the kept key is held now
            assert not await _held_elsewhere(fresh_dsn, "r"), "the run's own key is free"
            assert not await _claimable(fresh_dsn, "r"), "a claim query skips a kept run"
            assert not await taker.try_lock("r"), "a locker sees the kept key"
            assert not await _held_elsewhere(fresh_dsn, "r"), "and gave its own key back"
            assert not await keeper.try_lock("r"), "nor does the keeper lock it again"
            await keeper.unkeep("r")
            assert await _claimable(fresh_dsn, "r")
            assert await taker.try_lock("r")
            assert not await _claimable(fresh_dsn, "r")
        finally:
            await keeper.aclose()
            await taker.aclose()

    asyncio.run(go())


def test_a_lock_handed_over_outlives_the_loop_that_took_it(fresh_dsn: str) -> None:
    """A run lock taken on a caller's loop, moved with ``outlive_loop`` (as a run that
    stops with a call still in flight does), holds the run after that loop has ended:
    for another store (another process) and for a new loop of this one, until released
    from any loop."""
    run = uuid.uuid4().hex
    store, other = PgCheckpointer(fresh_dsn), PgCheckpointer(fresh_dsn)

    async def take_and_hand_over() -> object:
        lock = await store.lock_run(run)
        assert lock is not None
        assert await other.lock_run(run) is None, "held by its loop's session"
        await lock.outlive_loop()
        assert not lock.lost
        return lock

    lock = asyncio.run(take_and_hand_over())  # that loop has ended now

    async def afterwards() -> None:
        assert await other.lock_run(run) is None, "another process cannot take it"
        assert await store.lock_run(run) is None, "nor can a new loop of this one"
        assert not await _claimable(fresh_dsn, run)
        await lock.release()  # type: ignore[attr-defined]
        assert await _claimable(fresh_dsn, run)
        taken = await other.lock_run(run)
        assert taken is not None
        await taken.release()
        await other.aclose()

    try:
        asyncio.run(afterwards())
    finally:
        asyncio.run(store.aclose())

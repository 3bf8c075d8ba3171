"""PostgreSQL run locks asked for together go in one statement, each answered in order.

A real lock session on a fresh database; a second session plays another process.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from oncegraph.storage.sql.pg_locks import TRY_LOCK, UNLOCK, LockSession


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

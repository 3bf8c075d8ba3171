"""PostgreSQL run liveness locks: session advisory locks on one dedicated connection.

Run ``r`` is locked by ``pg_try_advisory_lock(hashtextextended('oncegraph:' || r, 0))``
on a dedicated connection (the *lock session*), outside the pool, one per store, on the
process's home loop (:func:`oncegraph._loopbound.home_loop`) whatever loop asks, so a
lock outlives the loop of the caller that took it. PostgreSQL releases a session's
advisory locks when the session ends: when the process exits or is killed, or its
connection breaks. So a crashed holder is never
waited for, and :data:`HELD_BY_OTHERS` lets a claim query skip runs a live session
holds. A holder that is alive but silent (paused, partitioned, its loop blocked) is
treated as gone after ``claim_timeout`` seconds: the session sets
``idle_session_timeout`` and pings every third of it, so the SERVER ends a session that
stopped pinging, and its locks with it.

Invariants:

* A session's advisory locks are re-entrant, so the session also keeps the set of runs
  it holds, and refuses a second lock of one run (one holder per process, too).
* Statements on the session are serialized (one :class:`asyncio.Lock`).
* A failure on the session (its connection broke) marks every lock it held ``lost``:
  the server may have released them, so their holders must assume the run was taken.
  A new session is opened for the next lock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from oncegraph._loopbound import on_home

LOCK_KEY = "hashtextextended('oncegraph:' || %s, 0)"
TRY_LOCK = f"SELECT pg_try_advisory_lock({LOCK_KEY})"
UNLOCK = f"SELECT pg_advisory_unlock({LOCK_KEY})"

# For a claim query: true when a live session of this database holds run ``r.run_id``'s
# lock (two-part key of a bigint advisory lock: objsubid 1, high and low 32 bits).
HELD_BY_OTHERS = """EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = (hashtextextended('oncegraph:' || r.run_id, 0) >> 32)
                              & 4294967295
      AND l.objid::bigint = hashtextextended('oncegraph:' || r.run_id, 0) & 4294967295
)"""


class LockSession:
    """One connection holding this process's run locks (for one store and loop)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], timeout: float | None = None) -> None:
        self.conn = conn
        self.held: set[str] = set()
        self.broken = False
        self._lock = asyncio.Lock()
        self._pinger: asyncio.Task[None] | None = None
        if timeout:
            self._pinger = asyncio.get_running_loop().create_task(
                self._ping(timeout / 3), name="oncegraph-lock-session-ping"
            )

    @classmethod
    async def open(
        cls, dsn: str, *, connect_timeout: float, timeout: float | None
    ) -> LockSession:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout)),
            prepare_threshold=None,
        )
        if timeout:
            try:  # PostgreSQL 14+: the server ends the session once it stops pinging
                await conn.execute(f"SET idle_session_timeout = {max(1, round(timeout * 1000))}")
            except psycopg.Error:
                pass  # an older server: the session ends with its connection only
        return cls(conn, timeout)

    async def _ping(self, every: float) -> None:
        while not self.broken:
            await asyncio.sleep(every)
            async with self._lock:
                try:
                    await self.conn.execute("SELECT 1")
                except psycopg.Error:
                    self.broken = True

    async def try_lock(self, run_id: str) -> bool:
        if run_id in self.held:
            return False
        async with self._lock:
            try:
                cur = await self.conn.execute(TRY_LOCK, (run_id,))
                row = await cur.fetchone()
            except psycopg.Error:
                self.broken = True
                raise
        got = bool(row and row[0])
        if got:
            self.held.add(run_id)
        return got

    async def unlock(self, run_id: str) -> None:
        if run_id not in self.held:
            return
        self.held.discard(run_id)
        if self.broken:
            return  # the session is gone, and its locks with it
        async with self._lock:
            try:
                await self.conn.execute(UNLOCK, (run_id,))
            except psycopg.Error:
                self.broken = True

    async def aclose(self) -> None:
        self.broken = True
        self.held.clear()
        if self._pinger is not None:
            self._pinger.cancel()
        await self.conn.close()

    def abandon(self) -> None:
        """Its loop is gone: close the socket without one (the server drops the locks)."""
        self.broken = True
        self.held.clear()
        self.conn.pgconn.finish()


class PgRunLock:
    """One held run lock (:class:`~oncegraph.storage.protocols.RunLock`)."""

    __slots__ = ("_session", "run_id")

    def __init__(self, session: LockSession, run_id: str) -> None:
        self._session: LockSession | None = session
        self.run_id = run_id

    @property
    def lost(self) -> bool:
        return self._session is not None and self._session.broken

    async def release(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await on_home(session.unlock(self.run_id))


__all__ = ["HELD_BY_OTHERS", "LOCK_KEY", "TRY_LOCK", "UNLOCK", "LockSession", "PgRunLock"]

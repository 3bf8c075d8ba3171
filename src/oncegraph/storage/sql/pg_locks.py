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
* Statements on the session are serialized (one :class:`asyncio.Lock`), and the lock
  and unlock requests that wait meanwhile go together in ONE statement (:data:`BATCH`,
  in request order): 64 runs starting at once cost a few round trips, not 64 in a row.
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
_KEY = "hashtextextended('oncegraph:' || t.run_id, 0)"
# Several requests in one statement, in order (params: ops 'lock' | 'unlock', run ids);
# one row per request: did it get (lock) or give back (unlock) the lock.
BATCH = (
    f"SELECT CASE WHEN t.op = 'lock' THEN pg_try_advisory_lock({_KEY}) "
    f"ELSE pg_advisory_unlock({_KEY}) END "
    "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(op, run_id, n) ORDER BY t.n"
)

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
        self._locking: set[str] = set()  # runs whose lock request is on its way
        self._waiting: list[tuple[str, str, asyncio.Future[bool]]] = []  # (op, run, answer)
        self._sending = False
        self._sender: asyncio.Task[None] | None = None
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

    @property
    def busy(self) -> bool:
        """Requests are waiting or on their way (a lock given back included)."""
        return self._sending or bool(self._waiting)

    async def try_lock(self, run_id: str) -> bool:
        if run_id in self.held or run_id in self._locking:
            return False
        self._locking.add(run_id)
        try:
            got = await self._ask("lock", run_id)
        finally:
            self._locking.discard(run_id)
        if got:
            self.held.add(run_id)
        return got

    async def unlock(self, run_id: str) -> None:
        if run_id not in self.held:
            return
        self.held.discard(run_id)
        if self.broken:
            return  # the session is gone, and its locks with it
        try:
            await self._ask("unlock", run_id)
        except psycopg.Error:
            pass  # the session is marked broken: its locks are gone with it

    async def _ask(self, op: str, run_id: str) -> bool:
        """Queue one request; the sender sends what is queued in one statement."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((op, run_id, answer))
        if not self._sending:
            self._sending = True
            # held here: the loop keeps only a weak reference to a task
            self._sender = asyncio.get_running_loop().create_task(
                self._send(), name="oncegraph-lock-batch"
            )
        return await answer

    async def _send(self) -> None:
        try:
            while self._waiting:
                async with self._lock:
                    batch, self._waiting = self._waiting, []
                    ops = [op for op, _, _ in batch]
                    runs = [run for _, run, _ in batch]
                    try:
                        cur = await self.conn.execute(BATCH, (ops, runs))
                        rows = await cur.fetchall()
                        if len(rows) != len(batch):
                            raise psycopg.InterfaceError(
                                f"lock batch of {len(batch)} answered {len(rows)} rows"
                            )
                    except psycopg.Error as exc:
                        self.broken = True
                        for _, _, answer in batch:
                            if not answer.done():
                                answer.set_exception(exc)
                        continue
                for (op, run, answer), (ok,) in zip(batch, rows, strict=True):
                    if not answer.done():
                        answer.set_result(bool(ok))
                    elif op == "lock" and ok:  # its asker is gone: give the lock back
                        self._waiting.append(("unlock", run, _unwatched()))
        finally:
            self._sending = False

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


def _unwatched() -> asyncio.Future[bool]:
    """An answer nobody awaits (its error, if any, is retrieved so it is not reported)."""
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    answer.add_done_callback(lambda done: done.cancelled() or done.exception())
    return answer


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


__all__ = [
    "BATCH",
    "HELD_BY_OTHERS",
    "LOCK_KEY",
    "TRY_LOCK",
    "UNLOCK",
    "LockSession",
    "PgRunLock",
]

"""PostgreSQL run liveness locks: session advisory locks on a dedicated connection.

Run ``r`` is locked by ``pg_try_advisory_lock(hashtextextended('oncegraph:' || r, 0))``
on a dedicated connection (the *lock session*), outside the pool, one per store and
event loop: a run's lock and unlock are statements of the loop that runs it, with no hop
to another thread. PostgreSQL releases a session's advisory locks when the session
ends: when the process exits or is killed, or its connection breaks. So a crashed
holder is never waited for, and :data:`HELD_BY_OTHERS` lets a claim query skip runs a
live session holds. A holder that is alive but silent (paused, partitioned, its loop
blocked) is treated as gone after ``claim_timeout`` seconds: the session sets
``idle_session_timeout`` and pings every third of it, so the SERVER ends a session that
stopped pinging, and its locks with it.

A lock must outlive its loop when a call of the run outlives the run: a sync tool's
thread still running after its timeout, when the caller's loop may end (``asyncio.run``
returns) before the thread does. :meth:`PgRunLock.outlive_loop` hands the run over to
the *kept* key (``'oncegraph-kept:' || r``) on the session of the process's home loop
(:func:`oncegraph._loopbound.home_loop`), which lives as long as the process, and only
then lets the run's own key go. Whoever locks a run also checks that no other session
holds its kept key (a shared try-lock, given back at once), and a claim query skips a
run either key of which is held: a run is never free while a kept call may still run.

Invariants:

* A session's advisory locks are re-entrant, so the session also keeps the set of runs
  it holds (and of runs it keeps), and refuses a second lock of one run (one holder per
  process, too: two loops of one process have two sessions, which exclude each other).
* Statements on the session are serialized (one :class:`asyncio.Lock`), and the
  requests that wait meanwhile go together in ONE statement (:data:`BATCH`, in request
  order): 64 runs starting at once cost a few round trips, not 64 in a row.
* A failure on the session (its connection broke) marks every lock it held ``lost``:
  the server may have released them, so their holders must assume the run was taken.
  A new session is opened for the next lock.
* The kept key is taken BEFORE the run's own key is let go; a locker takes the own key
  BEFORE it checks the kept key. So at every moment one of them is held by the holder,
  or the locker sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import psycopg

from oncegraph._loopbound import is_home, on_home, running_loop
from oncegraph.storage.sql.pg_literals import plain_literals, plain_session

LOCK_KEY = "hashtextextended('oncegraph:' || %s, 0)"
KEPT_KEY = "hashtextextended('oncegraph-kept:' || %s, 0)"
TRY_LOCK = f"SELECT pg_try_advisory_lock({LOCK_KEY})"
UNLOCK = f"SELECT pg_advisory_unlock({LOCK_KEY})"
_KEY = "hashtextextended('oncegraph:' || t.run_id, 0)"
_KEPT = "hashtextextended('oncegraph-kept:' || t.run_id, 0)"
# Several requests in one statement, in order (params: ops, run ids); one row per
# request. 'lock': did it get the run (its own key taken, and no other session keeps it:
# else the own key is given back); 'unlock': gave the own key back; 'keep': took the
# kept key; 'unkeep': gave it back.
BATCH = (
    "SELECT CASE t.op "
    f"WHEN 'lock' THEN CASE WHEN pg_try_advisory_lock({_KEY}) THEN "
    f"CASE WHEN pg_try_advisory_lock_shared({_KEPT}) THEN pg_advisory_unlock_shared({_KEPT}) "
    f"ELSE NOT pg_advisory_unlock({_KEY}) END ELSE false END "
    f"WHEN 'unlock' THEN pg_advisory_unlock({_KEY}) "
    f"WHEN 'keep' THEN pg_try_advisory_lock({_KEPT}) "
    f"ELSE pg_advisory_unlock({_KEPT}) END "
    "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(op, run_id, n) ORDER BY t.n"
)
_BATCH_HEAD, _BATCH_TAIL = BATCH.split("unnest(%s::text[], %s::text[])")


def batch_message(
    conn: psycopg.AsyncConnection[Any], ops: list[str], runs: list[str]
) -> tuple[bytes, None] | tuple[str, tuple[list[str], list[str]]]:
    """The batch of ``ops`` on ``runs`` as one message: with its arrays written in on a
    session that reads plain literals (:mod:`~oncegraph.storage.sql.pg_literals`; no
    parameters to adapt and bind, a third less client CPU), else with parameters."""
    if not plain_session(conn):
        return BATCH, (ops, runs)
    quoted = plain_literals((*ops, *runs), _no_literal)
    if quoted is None:  # a NUL: psycopg says what is wrong with it
        return BATCH, (ops, runs)
    n = len(ops)
    arrays = f"unnest(ARRAY[{','.join(quoted[:n])}]::text[], ARRAY[{','.join(quoted[n:])}]::text[])"
    return (_BATCH_HEAD + arrays + _BATCH_TAIL).encode(), None


def _no_literal(value: Any) -> bytes:
    raise TypeError(f"a run lock batch holds text only, not {value!r}")


def _granted(key: str) -> str:
    """A granted advisory lock on bigint ``key`` (two-part: objsubid 1, high and low 32
    bits), in the ``pg_locks`` row ``l``."""
    return (
        f"(l.classid::bigint = ({key} >> 32) & 4294967295 "
        f"AND l.objid::bigint = {key} & 4294967295)"
    )


# For a claim query: true when a live session of this database holds run ``r.run_id``'s
# lock or its kept key (a call of it outlived its run and may still be running).
HELD_BY_OTHERS = f"""EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ({_granted("hashtextextended('oncegraph:' || r.run_id, 0)")}
           OR {_granted("hashtextextended('oncegraph-kept:' || r.run_id, 0)")})
)"""


SESSION_SHARED = (
    "this PostgreSQL address does not keep a session per connection (a transaction-pooling "
    "proxy such as PgBouncer with pool_mode=transaction): a run's lock taken on it can be "
    "taken a second time by another process, which could run the run twice. Give the "
    "database's direct address for the connections that hold a session: "
    "PgCheckpointer(proxy_dsn, prepared_statements=False, session_dsn=direct_dsn)"
)


async def check_session_kept(
    conn: psycopg.AsyncConnection[Any], dsn: str, connect_timeout: float
) -> None:
    """Raise :class:`~oncegraph.errors.ConfigError` unless ``conn`` holds a server session
    of its own, as session advisory locks (and LISTEN) need.

    Behind a transaction-pooling proxy, each statement of a connection may run on another
    server session, and two client connections may share one: a probe key locked on
    ``conn`` is then either gone by its next statement (another backend answers) or
    granted to a second connection as well (the same backend, re-entrant). Either shows.
    """
    from oncegraph.errors import ConfigError

    probe = "SELECT pg_backend_pid(), pg_try_advisory_lock(hashtextextended(%s, 0))"
    key = f"oncegraph-session-check:{id(conn)}:{asyncio.get_running_loop().time()}"
    row = await (await conn.execute(probe, (key,))).fetchone()
    again = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    shared = not row or not row[1] or not again or again[0] != row[0]
    if not shared:
        other = await psycopg.AsyncConnection.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(1, round(connect_timeout)),
            prepare_threshold=None,
        )
        try:
            got = await (await other.execute(probe, (key,))).fetchone()
            shared = bool(got and got[1])
        finally:
            await other.close()
    await conn.execute("SELECT pg_advisory_unlock_all()")
    if shared:
        raise ConfigError(SESSION_SHARED)


class LockSession:
    """One connection holding this process's run locks (for one store and loop)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], timeout: float | None = None) -> None:
        self.conn = conn
        self.held: set[str] = set()
        self.kept: set[str] = set()  # runs whose kept key this session holds
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
        cls, dsn: str, *, connect_timeout: float, timeout: float | None, verify: bool = False
    ) -> LockSession:
        """``verify``: first prove that ``dsn`` keeps a session of its own (see
        :func:`check_session_kept`); a store that may sit behind a pooling proxy asks it."""
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout)),
            prepare_threshold=None,
        )
        if verify:
            try:
                await check_session_kept(conn, dsn, connect_timeout)
            except BaseException:
                await conn.close()
                raise
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
        if run_id in self.held or run_id in self._locking or run_id in self.kept:
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
        await self._give_back("unlock", run_id, self.held)

    async def keep(self, run_id: str) -> bool:
        """Take run ``run_id``'s kept key (its holder's own key is still held)."""
        if run_id in self.kept:
            return True
        got = await self._ask("keep", run_id)
        if got:
            self.kept.add(run_id)
        return got

    async def unkeep(self, run_id: str) -> None:
        await self._give_back("unkeep", run_id, self.kept)

    async def _give_back(self, op: str, run_id: str, have: set[str]) -> None:
        if run_id not in have:
            return
        have.discard(run_id)
        if self.broken:
            return  # the session is gone, and its locks with it
        try:
            await self._ask(op, run_id)
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
                        cur = await self.conn.execute(*batch_message(self.conn, ops, runs))
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
                    elif op in ("lock", "keep") and ok:  # its asker is gone: give it back
                        back = "unlock" if op == "lock" else "unkeep"
                        self._waiting.append((back, run, _unwatched()))
        finally:
            self._sending = False

    async def aclose(self) -> None:
        self.broken = True
        self.held.clear()
        self.kept.clear()
        if self._pinger is not None:
            self._pinger.cancel()
        await self.conn.close()

    def abandon(self) -> None:
        """Its loop is gone: close the socket without one (the server drops the locks)."""
        self.broken = True
        self.held.clear()
        self.kept.clear()
        self.conn.pgconn.finish()


def _unwatched() -> asyncio.Future[bool]:
    """An answer nobody awaits (its error, if any, is retrieved so it is not reported)."""
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    answer.add_done_callback(lambda done: done.cancelled() or done.exception())
    return answer


class PgRunLock:
    """One held run lock (:class:`~oncegraph.storage.protocols.RunLock`): the run's own
    key on the lock session of the loop that took it, or, once handed over
    (:meth:`outlive_loop`), its kept key on the home loop's session."""

    __slots__ = ("_home", "_kept", "_loop", "_session", "run_id")

    def __init__(
        self,
        session: LockSession,
        run_id: str,
        home: Callable[[], Awaitable[LockSession]],
    ) -> None:
        self._session: LockSession | None = session
        self._loop = asyncio.get_running_loop()
        self._home = home  # the home loop's lock session (called on the home loop)
        self._kept: LockSession | None = None
        self.run_id = run_id

    @property
    def lost(self) -> bool:
        return any(s is not None and s.broken for s in (self._session, self._kept))

    async def outlive_loop(self) -> None:
        """Hold the run on the home loop from now on, so the lock survives the end of
        the loop that took it: take the kept key there, then let the own key go. If
        the kept key cannot be taken, the own key stays held (and dies with its loop's
        session), and the failure is raised."""
        session = self._session
        if session is None or self._kept is not None or is_home(self._loop):
            return  # released, handed over already, or on the home loop (it outlives all)
        kept = await on_home(self._keep_at_home())
        self._kept = kept
        self._session = None
        await _on(self._loop, session.unlock(self.run_id))

    async def _keep_at_home(self) -> LockSession:
        home = await self._home()
        if not await home.keep(self.run_id):
            raise psycopg.OperationalError(
                f"run {self.run_id}: its kept key is held by another session"
            )
        return home

    async def release(self) -> None:
        session, self._session = self._session, None
        kept, self._kept = self._kept, None
        if kept is not None:
            await on_home(kept.unkeep(self.run_id))
        if session is not None:
            await _on(self._loop, session.unlock(self.run_id))


async def _on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> None:
    """Await ``coro`` on ``loop`` (its session's): here, or through that loop's thread.
    A loop that has stopped cannot: its session ends when it is dropped, and the lock
    with it."""
    if running_loop() is loop:
        await coro
    elif loop.is_running():
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
    else:
        coro.close()


__all__ = [
    "BATCH",
    "HELD_BY_OTHERS",
    "KEPT_KEY",
    "LOCK_KEY",
    "TRY_LOCK",
    "UNLOCK",
    "LockSession",
    "PgRunLock",
    "batch_message",
]

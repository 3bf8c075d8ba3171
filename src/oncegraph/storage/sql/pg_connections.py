"""What :class:`~oncegraph.storage.sql.postgres.PgCheckpointer` opens in each event loop:
its pool and its lock session, the schema checked once per store, and their closing.

* **One pool per event loop.** An ``AsyncConnectionPool`` is bound to the loop it was
  opened on, and the framework's sync facade runs on its own loop thread while users
  may ``ainvoke`` on theirs. Each running loop gets its own pool on first use
  (:class:`oncegraph._loopbound.LoopBound`); a pool whose loop is closed cannot be
  closed properly and is dropped, its connections dying with the garbage collector.
* **One lock session per loop that runs runs**: a connection of its own, outside
  ``max_size`` (:mod:`oncegraph.storage.sql.pg_locks`), to ``session_dsn``.
* **Migrations are serialized** by ``pg_advisory_xact_lock`` inside one transaction,
  so processes starting at once apply each migration exactly once; a database newer
  than this code is never touched.
* What is opened on the home loop is closed at exit, or when the store is dropped
  unclosed (:func:`oncegraph._loopbound.close_at_exit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from oncegraph._loopbound import (
    LoopBound,
    close_at_exit,
    home_loop_if_running,
    is_home,
    running_loop,
)
from oncegraph.errors import StorageError
from oncegraph.storage.records import RunRecord, ThreadRecord
from oncegraph.storage.sql.migrate import SchemaState
from oncegraph.storage.sql.migrate import verify as verify_state
from oncegraph.storage.sql.pg_group import CommitGroups
from oncegraph.storage.sql.pg_locks import LockSession
from oncegraph.storage.sql.pg_pool import close_pool, mapped, open_pool
from oncegraph.storage.sql.pg_reads import SharedReads
from oncegraph.storage.sql.pg_schema import apply_missing, read_version


class PgConnections:
    """The pool and lock session of each loop, and the schema check (a mixin of
    :class:`~oncegraph.storage.sql.postgres.PgCheckpointer`, which sets the fields)."""

    _dsn: str
    _session_dsn: str
    _where: str
    min_size: int
    max_size: int
    auto_migrate: bool
    connect_timeout: float
    pool_timeout: float
    prepared_statements: bool
    claim_timeout: float | None
    commit_groups: CommitGroups
    thread_reads: SharedReads[str, tuple[ThreadRecord | None, RunRecord | None]]

    def _init_connections(self) -> None:
        self._pools: LoopBound[AsyncConnectionPool] = LoopBound()
        self._lock_sessions: LoopBound[LockSession] = LoopBound(orphan=LockSession.abandon)
        self._home_finalizer: weakref.finalize[Any, Any] | None = None
        self._schema_ok = False

    @property
    def _label(self) -> str:
        return f"PostgreSQL {self._where}"

    # -- lifecycle -----------------------------------------------------------------------

    async def setup(self) -> None:
        """Open this loop's pool and migrate (or verify) the schema. Idempotent."""
        await self._ready()

    async def aclose(self) -> None:
        """Close every pool this store opened (those of other live loops on their loop).

        Closing also ends the lock sessions, which releases every run lock still held."""
        await self.commit_groups.drain()
        await self.thread_reads.drain()
        await self._lock_sessions.aclose_all(_close_session, suppress=(psycopg.Error,))
        await self._pools.aclose_all(close_pool, suppress=(psycopg.Error,))

    async def aclose_home(self) -> None:
        """Close what this store opened on the home loop (at exit; see ``close_at_exit``)."""
        await self.commit_groups.drain()
        await self.thread_reads.drain()
        await self._lock_sessions.aclose_current(_close_session, suppress=(psycopg.Error,))
        await self._pools.aclose_current(close_pool, suppress=(psycopg.Error,))

    async def migrate(self) -> SchemaState:
        """Apply the missing migrations; returns the (now current) schema state.

        A current schema costs one read. Otherwise the work happens in one transaction
        holding ``pg_advisory_xact_lock``: the version is re-read under the lock, so of
        several processes migrating at once one applies each migration and the others
        find nothing left to do. Raises StorageError, changing nothing, if the database
        is newer than this code.
        """
        state = await self.verify()
        if state.needs_migrate:
            await self._migrate()
            state = await self.verify()
        self._schema_ok = True
        return state

    async def verify(self) -> SchemaState:
        """Read the schema version without changing anything.

        Raises StorageError when the database is newer than this code; an older one is
        reported through ``SchemaState.needs_migrate``.
        """
        pool = await self._pool()
        with mapped("verify", self._where):
            async with pool.connection() as conn:
                current = await read_version(conn)
        return verify_state(current, self._label)

    async def _migrate(self) -> int:
        """Apply what is missing under the advisory lock; returns how many were applied."""
        pool = await self._pool()
        with mapped("migrate", self._where):
            async with pool.connection() as conn:
                return await apply_missing(conn, self._label)

    # -- this loop's pool ----------------------------------------------------------------

    async def _ready(self) -> AsyncConnectionPool:
        """This loop's pool, with the schema migrated or verified once per store."""
        pool = self._pools.peek()
        if pool is not None and self._schema_ok:
            return pool
        pool = await self._pool()
        if not self._schema_ok:
            if self.auto_migrate:
                await self.migrate()
            else:
                state = await self.verify()
                if state.needs_migrate:
                    raise StorageError(
                        f"PostgreSQL {self._where}: {state.describe()}; run `oncegraph db "
                        "migrate --postgres DSN` or pass auto_migrate=True"
                    )
                self._schema_ok = True
        return pool

    async def _pool(self) -> AsyncConnectionPool:
        """This loop's pool, opened on first use in the loop."""
        return await self._pools.aget(self._open_pool)

    def _opening_here(self) -> None:
        """A pool or lock session is being opened on this loop: one on the home loop is
        closed at exit, or when the store is dropped unclosed."""
        if is_home(running_loop()):
            close_at_exit(self)
            if self._home_finalizer is None:
                self._home_finalizer = weakref.finalize(
                    self, _drop_home, self._pools, self._lock_sessions
                )

    async def _open_pool(self) -> AsyncConnectionPool:
        self._opening_here()
        return await open_pool(
            self._dsn,
            self._where,
            min_size=self.min_size,
            max_size=self.max_size,
            pool_timeout=self.pool_timeout,
            connect_timeout=self.connect_timeout,
            prepared_statements=self.prepared_statements,
        )

    # -- this loop's lock session ----------------------------------------------------------

    async def _home_lock_session(self) -> LockSession:
        """The home loop's lock session (called there, by :class:`PgRunLock`)."""
        with mapped("lock_run", self._where):
            return await self._lock_session()

    async def _lock_session(self) -> LockSession:
        session = self._lock_sessions.peek()
        if session is not None and session.broken:
            await self._close_lock_session()
        if not self._schema_ok:
            await self._ready()
        return await self._lock_sessions.aget(self._open_lock_session)

    async def _close_lock_session(self) -> None:
        """Drop this loop's lock session (it broke); the next lock opens another."""
        await self._lock_sessions.aclose_current(_close_session, suppress=(psycopg.Error,))

    async def _open_lock_session(self) -> LockSession:
        self._opening_here()
        with mapped("connect", self._where):
            return await LockSession.open(
                self._session_dsn,
                connect_timeout=self.connect_timeout,
                timeout=self.claim_timeout,
                verify=not self.prepared_statements,
            )


async def _close_session(session: LockSession) -> None:
    await session.aclose()


def _drop_home(pools: LoopBound[AsyncConnectionPool], sessions: LoopBound[LockSession]) -> None:
    """A store was garbage-collected unclosed: close what it opened on the home loop
    (there, without waiting), so its pool's tasks end instead of being destroyed."""
    loop = home_loop_if_running()
    if loop is None:
        return

    async def close() -> None:
        await sessions.aclose_all(_close_session, suppress=(psycopg.Error,))
        await pools.aclose_all(close_pool, suppress=(psycopg.Error,))

    with contextlib.suppress(RuntimeError):
        asyncio.run_coroutine_threadsafe(close(), loop)


__all__ = ["PgConnections"]

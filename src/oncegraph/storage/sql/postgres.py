"""PostgreSQL :class:`~oncegraph.storage.protocols.Checkpointer` (psycopg 3, async pool).

Every protocol method but the step commit and run locks is the shared store's
(:class:`~oncegraph.storage.sql.store.SqlStore`); this module is PostgreSQL's dialect:
the pool, the one-message step commit, advisory locks, the migration lock, the run
queue's statements (:mod:`.pg_queue`) and the error map (:mod:`.pg_pool`). The shared
statements (``?`` placeholders) are converted to ``%s`` once per statement text.

Invariants:

* **One pool and one lock session per event loop**, the schema migrated (or verified)
  once per store, under an advisory lock (:mod:`oncegraph.storage.sql.pg_connections`).
* **A step is one transaction** (:class:`~oncegraph.storage.records.StepCommit`):
  the thread-version compare-and-swap comes first (it takes the thread's row lock, so
  racing writers of one thread queue behind it and re-check the version), then the
  run fence, the rows, and the head move, in ONE message that PostgreSQL runs as one
  implicit transaction (:mod:`oncegraph.storage.sql.pg_step`): any failure rolls the
  whole step back, in one round trip.
* **No cache on any path.** Every read comes from the database. A Redis hot cache of
  heads was measured and removed: a verified hit needs the thread row anyway (the
  version check), so it saved no read and cost a Redis round trip per step;
  ``redis_url=`` / ``cache=`` are accepted for compatibility and have no effect.
* **Run locks die with their session.** :meth:`PgCheckpointer.lock_run` takes a session
  advisory lock on a dedicated connection per loop (:mod:`oncegraph.storage.sql.pg_locks`);
  fenced writes check the run's token in the same statement as the write.
* Driver errors become :class:`~oncegraph.errors.StorageError` subclasses here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Unpack

try:
    import psycopg
    import psycopg_pool  # noqa: F401  (the pool's; checked here for the message below)
    from psycopg import errors as pg_errors
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "PgCheckpointer needs psycopg 3 and psycopg_pool: pip install 'oncegraph[postgres]'"
    ) from exc

from oncegraph._loopbound import running_loop
from oncegraph.errors import ConfigError, StorageError
from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.protocols import Cache
from oncegraph.storage.records import (
    AuditRecord,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    ThreadRecord,
    now,
)
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.migrate import SchemaState
from oncegraph.storage.sql.pg_commit import StepCommits, check_run
from oncegraph.storage.sql.pg_connections import PgConnections
from oncegraph.storage.sql.pg_locks import PgRunLock
from oncegraph.storage.sql.pg_pool import describe_dsn, mapped
from oncegraph.storage.sql.pg_queue import (
    ANNOUNCE,
    QUEUE_FENCE_NOTIFY,
    RUN_INSERT_NOTIFY,
    RUNS_CHANNEL,
    PgRunQueue,
)
from oncegraph.storage.sql.pg_reads import SharedReads
from oncegraph.storage.sql.pg_schema import MIGRATION_LOCK_KEY
from oncegraph.storage.sql.pg_step import StepWriter
from oncegraph.storage.sql.pg_tx import FENCED, PgTx, pg
from oncegraph.storage.sql.store import SqlStore
from oncegraph.storage.sql.store_port import FirstWrite, How, Tx

log = logging.getLogger("oncegraph.storage.postgres")


# Params: an array of distinct thread ids. THREAD_OPENING's row for each, in their order
# (the shared read of runs starting together: pg_reads).
_THREAD_OPENINGS = (
    f"SELECT {', '.join('t.' + c for c in S.THREAD_COLUMNS)}, "
    f"{', '.join('r.' + c for c in S.RUN_COLUMNS)} "
    "FROM unnest(CAST(? AS TEXT[])) WITH ORDINALITY AS q(thread_id, i) "
    "LEFT JOIN oncegraph_threads t ON t.thread_id = q.thread_id "
    f"LEFT JOIN LATERAL (SELECT {', '.join(S.RUN_COLUMNS)} FROM oncegraph_runs l "
    f"WHERE l.thread_id = q.thread_id {S.THREAD_ORDER} LIMIT 1) r "
    "ON TRUE ORDER BY q.i"
)
THREAD_OPENINGS = pg(_THREAD_OPENINGS)


class PgCheckpointer(PgConnections, SqlStore):
    """State and effect ledger in PostgreSQL.

    ``PgCheckpointer(postgres_dsn="postgresql://...")``; the DSN may also be given
    positionally. ``redis_url=`` (and ``cache=``, ``cache_ttl_seconds=``,
    ``cache_prefix=``) are accepted and not used: every read comes from the database (see
    the module docstring; nothing is written to Redis). The pool opens lazily
    (``setup()`` or first use) in each event loop that uses the store; with
    ``auto_migrate`` the schema is migrated then, otherwise it is verified and a missing
    migration is an error naming the fix. ``prepared_statements=False`` is for a
    transaction-pooling proxy (PgBouncer ``pool_mode=transaction``), which cannot keep a
    session's prepared statements: nothing is prepared then, by oncegraph or by psycopg,
    at the cost of a parse and plan per statement. Such a proxy cannot hold a session
    either, which the run locks and the workers' ``LISTEN`` need: give the database's
    direct address as ``session_dsn=`` (it defaults to ``postgres_dsn``). With
    ``prepared_statements=False`` the store first checks that the session address keeps
    a session, and refuses a proxy's with an error naming ``session_dsn``.

    ``claim_timeout`` (seconds, default 30): a process holding a run that stays silent
    that long (paused, partitioned, its loop blocked) is treated as gone and the run may
    be taken over (see :mod:`oncegraph.storage.sql.pg_locks`); ``None`` waits for its
    connection to end. Besides its pool, each event loop that runs runs opens one lock
    session (a connection of its own, outside ``max_size``).

    Step commits that come while the loop has one in flight are sent together, one
    transaction for the group (:mod:`oncegraph.storage.sql.pg_group`).

    ``encryption`` (an :class:`~oncegraph.storage.encryption.EncryptionKeys`) encrypts
    payloads, results and state at rest (:mod:`oncegraph.storage.encryption`).
    A queued run (``submit``) is announced with ``NOTIFY oncegraph_runs`` in its insert's
    transaction, so idle workers wake at once (:data:`RUNS_CHANNEL`).
    """

    queues_runs = True  # workers claim this store's queued runs (app.submit is allowed)

    def __init__(
        self,
        postgres_dsn: str,
        redis_url: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 10,
        auto_migrate: bool = True,
        cache_ttl_seconds: float = 3600,
        cache_prefix: str = "oncegraph:",
        cache: Cache | None = None,
        connect_timeout: float = 10.0,
        pool_timeout: float = 30.0,
        prepared_statements: bool = True,
        claim_timeout: float | None = 30.0,
        encryption: EncryptionKeys | None = None,
        session_dsn: str | None = None,
    ) -> None:
        if not postgres_dsn:
            raise ConfigError("PgCheckpointer needs a DSN, e.g. postgresql://user@host/db")
        if min_size < 0 or max_size < max(min_size, 1):
            raise ConfigError(f"bad pool size: min_size={min_size}, max_size={max_size}")
        if cache is not None and redis_url is not None:
            raise ConfigError("give PgCheckpointer either redis_url or cache, not both")
        self._dsn = postgres_dsn
        self._session_dsn = session_dsn or postgres_dsn  # run locks, LISTEN (may hold a password)
        self._where = describe_dsn(postgres_dsn)
        self.min_size = min_size
        self.max_size = max_size
        self.auto_migrate = auto_migrate
        self.connect_timeout = connect_timeout
        self.pool_timeout = pool_timeout
        if redis_url is not None or cache is not None:
            log.info(
                "PgCheckpointer(%s=...) is accepted and has no effect: every read comes "
                "from PostgreSQL (a verified cache hit saved no read)",
                "redis_url" if redis_url is not None else "cache",
            )
        self._init_connections()
        self.prepared_statements = prepared_statements
        self.claim_timeout = claim_timeout
        # PostgreSQL's planner counts statuses: its listing does not.
        self._init_port(rows.Rows(encryption), count_statuses=False)
        steps = StepWriter(prepared=prepared_statements, codec=self.rows)
        self._commits = StepCommits(self._connection, self._where, steps)
        self.commit_groups = self._commits.groups
        self.thread_reads: SharedReads[str, tuple[ThreadRecord | None, RunRecord | None]] = (
            SharedReads(self._open_thread_alone, self._open_threads, self._thread_opening)
        )

    def session_conninfo(self) -> str:
        """Where the connections that keep a session go (the run locks, a worker's
        ``LISTEN``): ``session_dsn`` if given, else the store's DSN. It may hold a
        password: never log it."""
        return self._session_dsn

    def __repr__(self) -> str:
        return f"PgCheckpointer({self._where})"

    # -- checkpoints ---------------------------------------------------------------------

    async def commit(self, commit: StepCommit) -> int:
        """One step: one message, one transaction (:mod:`.pg_step`); alone when the loop
        has no commit in flight, else with the steps waiting beside it (:mod:`.pg_group`)."""
        rows.check_commit(commit)
        ts = now()
        await self._ready()
        return await self.commit_groups.commit(commit, ts)

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        """The thread and its latest run, read in one statement; runs of this loop that
        start together share it (:mod:`~oncegraph.storage.sql.pg_reads`)."""
        return await self.thread_reads.read(thread_id)

    async def _open_thread_alone(
        self, thread_id: str
    ) -> tuple[ThreadRecord | None, RunRecord | None]:
        return await super().open_thread(thread_id)

    async def _open_threads(self, thread_ids: Sequence[str]) -> list[Any]:
        return await self._fetchall("open_thread", _THREAD_OPENINGS, (list(thread_ids),))

    def _thread_opening(self, row: Any) -> tuple[ThreadRecord | None, RunRecord | None]:
        return self.rows.thread_opening_from_row(row)

    async def lock_run(self, run_id: str) -> PgRunLock | None:
        """The lock lives on this loop's lock session (no hop to another thread). A call
        that outlives its run hands it over to the home loop's session
        (:meth:`PgRunLock.outlive_loop`, :mod:`oncegraph.runtime.claim`), since the
        caller's loop may end (``asyncio.run`` returns) while the call is in flight."""
        session = await self._lock_session()
        with mapped("lock_run", self._where):
            try:
                got = await session.try_lock(run_id)
            except psycopg.Error:
                await self._close_lock_session()
                raise
        return PgRunLock(session, run_id, self._home_lock_session) if got else None

    # -- the dialect's hooks (store_port) -----------------------------------------------

    def _run_insert(self, run: RunRecord) -> str:
        return RUN_INSERT_NOTIFY if run.status is RunStatus.QUEUED else S.RUN_INSERT

    @contextlib.asynccontextmanager
    async def _connection(
        self, op: str, cls: type[StorageError] = StorageError, *, duplicate: str | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of this loop's pool for ``op``: driver errors become ``cls``, a
        unique violation ``StorageError(duplicate)`` when that is given."""
        pool = await self._ready()
        try:
            with mapped(op, self._where, cls):
                async with pool.connection() as conn:
                    yield conn
        except StorageError as exc:
            if duplicate is not None and isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise StorageError(duplicate) from exc.__cause__
            raise

    async def _fetchall(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> list[Any]:
        async with self._connection(op, cls) as conn:
            return await (await conn.execute(pg(sql), params)).fetchall()

    async def _fetchone(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> Any:
        async with self._connection(op, cls) as conn:
            return await (await conn.execute(pg(sql), params)).fetchone()

    async def _write(self, op: str, sql: str, params: Sequence[Any], **how: Unpack[How]) -> int:
        """One statement (fenced in itself); zero rows of a fenced write is explained
        (unknown run, lost fence) or returned."""
        fence, audit = how.get("fence"), how.get("audit")
        if fence is not None:
            sql, params = FENCED[sql], (*params, *fence)
        key = None if audit is None else await self._chain_key()
        async with self._connection(op, duplicate=how.get("duplicate")) as conn:
            if audit is None:
                count = (await conn.execute(pg(sql), params)).rowcount
            else:
                async with conn.transaction():
                    count = (await conn.execute(pg(sql), params)).rowcount
                    if count and key is not None:
                        await self._append_audit_in_tx(PgTx(conn), audit, key)
            if count == 0 and fence is not None:
                await check_run(conn, *fence)
            return count

    async def _first_writer(
        self, op: str, w: FirstWrite, cls: type[StorageError] = StorageError
    ) -> tuple[bool, Any]:
        insert, params, fence = w.insert, w.params, w.fence
        if fence is not None:
            insert, params = FENCED[insert], (*params, *fence)
        async with self._connection(op, cls) as conn:
            cur = await conn.execute(pg(insert), params)
            if await cur.fetchone() is not None:
                return True, None
            if fence is not None:  # fenced out, or the row exists?
                await check_run(conn, *fence)
            # ON CONFLICT waited for the first writer to commit: its row is visible.
            cur = await conn.execute(pg(w.select), w.key)
            return False, await cur.fetchone()

    @contextlib.asynccontextmanager
    async def _transaction(
        self, op: str, *, duplicate: str | None = None, chained: bool = False
    ) -> AsyncIterator[Tx]:
        """``chained`` (it appends an audit link last): the transaction is a pipeline, so
        the chain's lock and head read go in one round trip and the link's insert and
        the COMMIT in one more. Every process's audit appends wait for that lock, and a
        busy event loop is slow to send the next statement: held over four round trips
        (lock, head, insert, commit), it kept an answer-queueing process at a fraction
        of its speed, most of its connections waiting for the lock."""
        async with self._connection(op, duplicate=duplicate) as conn:
            pipeline = conn.pipeline() if chained else contextlib.nullcontext()
            async with pipeline, conn.transaction():
                tx = PgTx(conn)
                yield tx
                if tx.discarded:
                    raise psycopg.Rollback()  # counted, not written

    def run_queue(self) -> PgRunQueue:
        """This store's run queue: the claim, renew and release statements workers use
        (:mod:`oncegraph.storage.sql.pg_queue`)."""
        return PgRunQueue(self._queue_read, self._queue_write)

    async def queue_answer(
        self,
        writes: TaskWrite | Sequence[TaskWrite],
        run_id: str,
        token: int,
        audit: AuditRecord | None = None,
    ) -> RunRecord | None:
        """An answered run handed to the workers in ONE transaction, sent as one pipeline:
        the answer's task writes and the run fenced into ``queued`` (all under ``token``:
        the answer's claim, or the token the run was read with under its lock), the
        workers' notice, delivered at the commit, and ``audit`` (who answered what)
        appended to the audit chain. None, with nothing written, when the token has moved
        on (another process took the run).

        One connection and one round trip where the write, the queueing and the notice
        were three of each; and a process that dies between them can no longer leave
        the answer written and the run not queued. With ``audit``, the answer needs no
        fence of its own before it (the run ``running`` for a moment, and its audit link,
        in a transaction of their own): the run goes from waiting to queued at once."""
        answers = [writes] if isinstance(writes, TaskWrite) else list(writes)
        error = self.rows.error_param(run_id, None)
        fence = (None, str(RunStatus.QUEUED), error, now(), run_id, token)
        key = None if audit is None else await self._chain_key()
        connection = self._connection("queue_answer")
        async with connection as conn, conn.pipeline(), conn.transaction():
            wrote = [
                await conn.execute(
                    pg(FENCED[S.TASK_WRITE_UPSERT]),
                    (*self.rows.task_write_to_params(w), run_id, token),
                )
                for w in answers
            ]
            queued = await conn.execute(pg(QUEUE_FENCE_NOTIFY), fence)
            if key is not None:  # the chain's lock and head in the same round trip
                await conn.execute(chain.PG_LOCK)
                at = await conn.execute(pg(S.AUDIT_CHAIN_HEAD), ())
            row = await queued.fetchone()
            if row is None or any(w.rowcount != 1 for w in wrote):
                raise psycopg.Rollback()  # fenced off: nothing written, nobody woken
            if audit is not None and key is not None:
                seq, mac = chain.next_link(chain.head_from_row(await at.fetchone()), audit, key)
                params = (*self.rows.audit_to_params(audit), seq, mac)
                await conn.execute(pg(S.AUDIT_CHAINED_INSERT), params)
            return self.rows.run_from_row(row[:-1])
        return None

    async def announce_queued(self, run_id: str) -> None:
        """Wake the listening workers for a run that became ``queued`` by an update (an
        answer queued for them), as a submitted run's insert does."""
        await self._queue_read("announce_queued", ANNOUNCE, (RUNS_CHANNEL, run_id))

    async def _queue_read(self, op: str, sql: str, params: Any) -> list[Any]:
        async with self._connection(op) as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def _queue_write(self, op: str, sql: str, params: Any) -> int:
        async with self._connection(op) as conn:
            return (await conn.execute(sql, params)).rowcount


# -- sync entry points for the CLI (`oncegraph db migrate|verify --postgres DSN`) -----


def migrate(dsn: str) -> SchemaState:
    """Create or migrate the schema of the PostgreSQL database at ``dsn``.

    Safe while other processes migrate or run; call it outside a running event loop.
    """
    return _run_once(dsn, "migrate")


def verify(dsn: str) -> SchemaState:
    """Read the schema version of the database at ``dsn`` without changing anything.

    Raises StorageError if it is unreachable or was migrated by a newer oncegraph;
    ``state.needs_migrate`` tells whether :func:`migrate` has work to do.
    """
    return _run_once(dsn, "verify")


def _run_once(dsn: str, op: str) -> SchemaState:
    if running_loop() is not None:
        raise RuntimeError(
            f"postgres.{op}() blocks; inside an event loop use "
            f"`await PgCheckpointer(dsn, auto_migrate=False).{op}()` instead"
        )
    return asyncio.run(_once(dsn, op))


async def _once(dsn: str, op: str) -> SchemaState:
    store = PgCheckpointer(dsn, min_size=1, max_size=1, auto_migrate=False)
    try:
        return await (store.migrate() if op == "migrate" else store.verify())
    finally:
        await store.aclose()


__all__ = [
    "MIGRATION_LOCK_KEY",
    "RUNS_CHANNEL",
    "THREAD_OPENINGS",
    "PgCheckpointer",
    "migrate",
    "verify",
]

"""PostgreSQL :class:`~oncegraph.storage.protocols.Checkpointer` (psycopg 3, async pool).

The statements are those of :mod:`oncegraph.storage.sql.statements`, converted once at
import from ``?`` to ``%s``; rows go through :mod:`oncegraph.storage.sql.rows`. This
module only adds what is PostgreSQL's own: the pool, the one-message step commit, the
migration lock and the error mapping.

Invariants:

* **One pool per event loop.** An ``AsyncConnectionPool`` is bound to the loop it was
  opened on, and the framework's sync facade runs on its own loop thread while users
  may ``ainvoke`` on theirs. Each running loop gets its own pool on first use
  (:class:`oncegraph._loopbound.LoopBound`); a pool whose loop is closed cannot be
  closed properly and is dropped, its connections dying with the garbage collector.
* **A step is one transaction** (:class:`~oncegraph.storage.records.StepCommit`):
  the thread-version compare-and-swap comes first (it takes the thread's row lock, so
  racing writers of one thread queue behind it and re-check the version), then the
  run fence, the rows, and the head move, in ONE message that PostgreSQL runs as one
  implicit transaction (:mod:`oncegraph.storage.sql.pg_step`): any failure rolls the
  whole step back, in one round trip.
* **Migrations are serialized** by ``pg_advisory_xact_lock`` inside one transaction,
  so processes starting at once apply each migration exactly once; a database newer
  than this code is never touched.
* **No cache on any path.** Every read comes from the database. A Redis hot cache of
  heads was measured (``benchmarks/cache_bench.py``): a verified hit needs the thread
  row anyway (the version check), so it saved no read and cost a Redis round trip per
  step; ``redis_url=`` / ``cache=`` are accepted for compatibility and not used.
* **Run locks die with their session.** :meth:`PgCheckpointer.lock_run` takes a session
  advisory lock on a dedicated connection per loop (:mod:`oncegraph.storage.sql.pg_locks`);
  fenced writes check the run's token in the same statement as the write.
* Driver errors become :class:`~oncegraph.errors.StorageError` subclasses here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, NoReturn

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
    from psycopg_pool.pool_async import StopWorker
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "PgCheckpointer needs psycopg 3 and psycopg_pool: pip install 'oncegraph[postgres]'"
    ) from exc

from oncegraph._loopbound import (
    LoopBound,
    close_at_exit,
    home_loop_if_running,
    is_home,
    running_loop,
)
from oncegraph.errors import (
    LeaseLostError,
    LedgerUnavailableError,
    OnceGraphError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
    StorageFullError,
)
from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.lifecycle import Closing
from oncegraph.storage.protocols import Cache
from oncegraph.storage.records import (
    PRUNABLE_EFFECT_RUN_STATUSES,
    PRUNABLE_EFFECT_STATUSES,
    UNFINISHED_STATUSES,
    AuditRecord,
    CheckpointRecord,
    EffectPayload,
    EffectRecord,
    EffectStatus,
    PruneReport,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    ThreadRecord,
    now,
    prune_effects_cutoff,
)
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql import dbsecret, rows
from oncegraph.storage.sql import migrate as M
from oncegraph.storage.sql import request_keys as R
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.listing import RunListing, Shape
from oncegraph.storage.sql.migrate import SchemaState
from oncegraph.storage.sql.pg_group import CommitGroups, Pending
from oncegraph.storage.sql.pg_locks import LockSession, PgRunLock
from oncegraph.storage.sql.pg_reads import SharedReads
from oncegraph.storage.sql.pg_step import StepWriter
from oncegraph.storage.sql.schema import LATEST_VERSION, SCHEMA_TABLE

log = logging.getLogger("oncegraph.storage.postgres")

_pg = S.to_format_params

# -- statements, converted once ------------------------------------------------------
THREAD_SELECT = _pg(S.THREAD_SELECT)
THREAD_OPENING = _pg(S.THREAD_OPENING)
# Params: an array of distinct thread ids. THREAD_OPENING's row for each, in their order
# (the shared read of runs starting together: pg_reads).
THREAD_OPENINGS = (
    f"SELECT {', '.join('t.' + c for c in S.THREAD_COLUMNS)}, "
    f"{', '.join('r.' + c for c in S.RUN_COLUMNS)} "
    "FROM unnest(CAST(%s AS TEXT[])) WITH ORDINALITY AS q(thread_id, i) "
    "LEFT JOIN oncegraph_threads t ON t.thread_id = q.thread_id "
    f"LEFT JOIN LATERAL (SELECT {', '.join(S.RUN_COLUMNS)} FROM oncegraph_runs l "
    f"WHERE l.thread_id = q.thread_id {S.THREAD_ORDER} LIMIT 1) r "
    "ON TRUE ORDER BY q.i"
)
RUN_OPENING = _pg(S.RUN_OPENING)
CHECKPOINT_SELECT = _pg(S.CHECKPOINT_SELECT)
CHECKPOINT_SELECT_HEAD = _pg(S.CHECKPOINT_SELECT_HEAD)
CHECKPOINT_LIST = _pg(S.CHECKPOINT_LIST)
CHECKPOINT_LIST_BY_RUN = _pg(S.CHECKPOINT_LIST_BY_RUN)
LOG_SELECT = _pg(S.LOG_SELECT)
RUN_INSERT = _pg(S.RUN_INSERT)
# Workers LISTEN on this channel; a queued run is announced in the transaction that
# inserts it, so the notice is delivered exactly when the run becomes visible.
RUNS_CHANNEL = "oncegraph_runs"
RUN_INSERT_NOTIFY = (
    f"WITH ins AS ({RUN_INSERT} RETURNING run_id) "
    f"SELECT pg_notify('{RUNS_CHANNEL}', ins.run_id) FROM ins"
)
RUN_SELECT = _pg(S.RUN_SELECT)
RUN_EXISTS = _pg(S.RUN_EXISTS)
THREAD_VERSION = "SELECT version FROM oncegraph_threads WHERE thread_id = %s"
RUN_SET_STATUS = _pg(S.RUN_SET_STATUS)
RUN_SET_STATUS_FENCED = _pg(S.RUN_SET_STATUS_FENCED)
TASK_WRITE_UPSERT = _pg(S.TASK_WRITE_UPSERT)
TASK_WRITE_UPSERT_FENCED = _pg(S.TASK_WRITE_UPSERT_FENCED)
RUN_FENCE = _pg(S.RUN_FENCE)
RUN_FENCE_STATUS = _pg(S.RUN_FENCE_STATUS)
EFFECT_INSERT_FENCED = _pg(S.EFFECT_INSERT_FENCED)
EFFECT_UPDATE_CAS = _pg(S.EFFECT_UPDATE_CAS)
EFFECT_UPDATE_CAS_FENCED = _pg(S.EFFECT_UPDATE_CAS_FENCED)
EFFECT_UPSERT_FIRST = _pg(S.EFFECT_UPSERT_FIRST)
AUDIT_CHAINED_INSERT = _pg(S.AUDIT_CHAINED_INSERT)
AUDIT_CHAIN_PAGE = _pg(S.AUDIT_CHAIN_PAGE)
REQUEST_CLAIM = _pg(R.REQUEST_CLAIM)
REQUEST_SELECT = _pg(R.REQUEST_SELECT)
REQUEST_FINISH = _pg(R.REQUEST_FINISH)
REQUEST_RELEASE = _pg(R.REQUEST_RELEASE)
REQUEST_PRUNE = _pg(R.REQUEST_PRUNE)
EFFECT_UPSERT_FIRST_FENCED = _pg(S.EFFECT_UPSERT_FIRST_FENCED)
TASK_WRITES_SELECT = _pg(S.TASK_WRITES_SELECT)
TASK_WRITES_DELETE = _pg(S.TASK_WRITES_DELETE)
EFFECT_INSERT = _pg(S.EFFECT_INSERT)
EFFECT_SELECT = _pg(S.EFFECT_SELECT)
INSERT_VERSION = _pg(M.INSERT_VERSION)
THREAD_IDS_FIRST = _pg(S.THREAD_IDS_FIRST)
THREAD_IDS_AFTER = _pg(S.THREAD_IDS_AFTER)
SECRET_INSERT = _pg(dbsecret.SECRET_INSERT)
SECRET_SELECT = _pg(dbsecret.SECRET_SELECT)
_KEEP_RUN_STATUSES = tuple(sorted(str(s) for s in UNFINISHED_STATUSES))
_PRUNE_EFFECT_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_STATUSES)
_PRUNE_EFFECT_RUN_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_RUN_STATUSES)
CHECKPOINT_PRUNE = _pg(S.checkpoint_prune(len(_KEEP_RUN_STATUSES)))
EFFECT_PRUNE = _pg(S.effect_prune(len(_PRUNE_EFFECT_STATUSES), len(_PRUNE_EFFECT_RUN_STATUSES)))
_THREAD_PAGE = 500
# PostgreSQL's own: the migration lock, and the version read that tolerates a
# database the schema table was never created in.
ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock(%s)"
SCHEMA_TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
# "oncegraph" in ASCII, as a signed 64-bit advisory lock key shared by all processes.
MIGRATION_LOCK_KEY = int.from_bytes(b"\x00oncegrph", "big", signed=True)


@lru_cache(maxsize=64)
def _run_list(shape: Shape) -> str:
    return _pg(shape.sql())


@lru_cache(maxsize=16)
def _pg_listing(sql: str) -> str:  # the listing's own reads (RUN_APPS, ...)
    return _pg(sql)


@lru_cache(maxsize=64)
def _effect_list(
    by_run: bool, by_thread: bool, n_statuses: int, by_app: bool, by_tenant: bool
) -> str:
    return _pg(
        S.effect_list(
            by_run=by_run,
            by_thread=by_thread,
            n_statuses=n_statuses,
            by_app=by_app,
            by_tenant=by_tenant,
        )
    )


@lru_cache(maxsize=32)
def _effect_payloads(by_run: bool, by_thread: bool, results: bool, n_threads: int) -> str:
    return _pg(
        S.effect_payloads(
            by_run=by_run, by_thread=by_thread, results=results, n_threads=n_threads
        )
    )


# -- error mapping -------------------------------------------------------------------


@contextlib.contextmanager
def _mapped(op: str, where: str, cls: type[StorageError] = StorageError) -> Iterator[None]:
    """Turn driver errors into ``cls`` (a StorageError); our own errors pass through."""
    try:
        yield
    except OnceGraphError:
        raise
    except PoolTimeout as exc:
        raise cls(
            f"{op}: no PostgreSQL connection to {where} became available ({exc}). Check that "
            "the server is up and reachable, or raise max_size if the pool is exhausted."
        ) from exc
    except pg_errors.DiskFull as exc:
        raise StorageFullError(_full(op, where, exc)) from exc
    except psycopg.OperationalError as exc:
        raise cls(f"{op}: PostgreSQL at {where} failed: {exc}".rstrip()) from exc
    except psycopg.Error as exc:
        raise cls(f"{op} failed on {where}: {type(exc).__name__}: {exc}".rstrip()) from exc


def _full(op: str, where: str, exc: BaseException) -> str:
    detail = " ".join(str(exc).split())
    return (
        f"{op}: PostgreSQL at {where} is out of disk space ({detail}); the transaction was "
        "rolled back and nothing of it was stored. Free space on the database server's disk "
        "(or on the tablespace that holds the tables), then try again"
    )


def _describe_dsn(dsn: str) -> str:
    """``dbname@host:port`` for messages; never the password."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the configured PostgreSQL database"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"database {info.get('dbname', '?')!r} at {host}:{port}"


def _check_dsn(dsn: str) -> None:
    """Refuse a DSN libpq cannot parse before a pool sees it.

    psycopg_pool logs each failed connection attempt at WARNING with libpq's message,
    and a parse error quotes the offending token, which can be the password. The error
    raised here shows neither the DSN nor libpq's message, and is raised outside the
    ``except`` so that it does not even carry the parse error as its context.
    """
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        pass
    else:
        return
    raise StorageError(
        "the PostgreSQL DSN could not be parsed (its text is not shown: it may hold a "
        "password). Check its quoting: in key=value form quote a value with spaces or "
        "quotes as password='a b' (backslash-escape ' and \\); in a postgresql:// URL "
        "percent-encode reserved characters (@ as %40, / as %2F, space as %20)."
    )


def _duplicate_message(exc: pg_errors.UniqueViolation, commit: StepCommit) -> str:
    table = getattr(exc.diag, "table_name", None) or ""
    if table == "oncegraph_runs" and commit.new_run is not None:
        return f"run {commit.new_run.run_id!r} already exists; nothing was written"
    if table == "oncegraph_checkpoints":
        return f"checkpoint {commit.checkpoint.checkpoint_id!r} already exists; nothing was written"
    if table == "oncegraph_log":
        return (
            f"a log entry of thread {commit.thread_id!r} already exists (log entries are never "
            f"rewritten): {exc.diag.message_detail or exc}; nothing was written"
        )
    return f"commit of thread {commit.thread_id!r} hit a duplicate key ({exc}); nothing was written"


class _QuietCancellation(logging.Filter):
    """Drop psycopg_pool's "error connecting" warning when the error is a cancellation:
    the program's loop is ending (``asyncio.run`` returned), nothing failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, asyncio.CancelledError) for a in args)


logging.getLogger("psycopg.pool").addFilter(_QuietCancellation())


class _Pool(AsyncConnectionPool):
    """psycopg_pool's pool, with maintenance workers that let cancellation through.

    psycopg_pool's maintenance tasks swallow a ``CancelledError`` (a failed connect is
    logged and retried later), and its workers then wait for the next task. When a
    program's loop ends with such a task in progress (``asyncio.run`` cancels every task
    and waits for them), that worker never ends and the program never exits. This worker
    is the same loop, except that a cancellation, even one a task swallowed, ends it.
    """

    @classmethod
    async def worker(cls, q: Any) -> None:
        while True:
            task = await q.get()
            if isinstance(task, StopWorker):
                return
            try:
                await task.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("pool task %s failed: %s: %s", task, type(exc).__name__, exc)
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError  # the task swallowed our cancellation


class PgCheckpointer(Closing):
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
    at the cost of a parse and plan per statement.

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
    ) -> None:
        if not postgres_dsn:
            raise StorageError("PgCheckpointer needs a DSN, e.g. postgresql://user@host/db")
        if min_size < 0 or max_size < max(min_size, 1):
            raise StorageError(f"bad pool size: min_size={min_size}, max_size={max_size}")
        if cache is not None and redis_url is not None:
            raise StorageError("give PgCheckpointer either redis_url or cache, not both")
        self._dsn = postgres_dsn
        self._where = _describe_dsn(postgres_dsn)
        self.min_size = min_size
        self.max_size = max_size
        self.auto_migrate = auto_migrate
        self.connect_timeout = connect_timeout
        self.pool_timeout = pool_timeout
        if redis_url is not None or cache is not None:
            log.info(
                "PgCheckpointer(%s=...) is accepted and not used: every read comes from "
                "PostgreSQL (a verified cache hit saved no read; see benchmarks/README.md)",
                "redis_url" if redis_url is not None else "cache",
            )
        self._secret: bytes | None = None  # the database secret, read on first need
        self._hash_key: bytes | None = None
        self._chain_db_key: bytes | None = None  # the audit chain's, from the secret
        self._pools: LoopBound[AsyncConnectionPool] = LoopBound()
        self._lock_sessions: LoopBound[LockSession] = LoopBound(orphan=LockSession.abandon)
        self._home_finalizer: weakref.finalize[Any, Any] | None = None
        self._schema_ok = False
        self.prepared_statements = prepared_statements
        self.claim_timeout = claim_timeout
        self.rows = rows.Rows(encryption)  # the row codec, with encryption at rest if any
        self._listing = RunListing(count_statuses=False)  # its planner counts statuses
        self._steps = StepWriter(prepared=prepared_statements, codec=self.rows)
        self.commit_groups = CommitGroups(self._write_group, self._write_one)
        self.thread_reads: SharedReads[str, tuple[ThreadRecord | None, RunRecord | None]] = (
            SharedReads(self._open_thread_alone, self._open_threads, self._thread_opening)
        )

    def __repr__(self) -> str:
        return f"PgCheckpointer({self._where})"

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
        await self._pools.aclose_all(_close_pool, suppress=(psycopg.Error,))

    async def aclose_home(self) -> None:
        """Close what this store opened on the home loop (at exit; see ``close_at_exit``)."""
        await self.commit_groups.drain()
        await self.thread_reads.drain()
        await self._lock_sessions.aclose_current(_close_session, suppress=(psycopg.Error,))
        await self._pools.aclose_current(_close_pool, suppress=(psycopg.Error,))

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
        with _mapped("verify", self._where):
            async with pool.connection() as conn:
                cur = await conn.execute(SCHEMA_TABLE_EXISTS, (SCHEMA_TABLE,))
                exists = await cur.fetchone()
                current = 0
                if exists is not None and exists[0]:
                    cur = await conn.execute(M.SELECT_VERSION)
                    current = M.version_from_row(await cur.fetchone())
        return M.verify(current, f"PostgreSQL {self._where}")

    # -- checkpoints ---------------------------------------------------------------------

    async def commit(self, commit: StepCommit) -> int:
        """One step: one message, one transaction (:mod:`.pg_step`); alone when the loop
        has no commit in flight, else with the steps waiting beside it (:mod:`.pg_group`)."""
        rows.check_commit(commit)
        ts = now()
        await self._ready()
        return await self.commit_groups.commit(commit, ts)

    async def _write_group(self, items: list[Pending]) -> None:
        """Commit the steps of ``items`` together, or each on its own once that failed
        (nothing of it was committed); settle each one's answer (:mod:`.pg_group`)."""
        pool = await self._ready()
        with _mapped("commit", self._where):
            async with pool.connection() as conn:
                if len(items) > 1:
                    try:
                        counts = await self._steps.send_many(
                            conn, [(p.commit, p.ts) for p in items]
                        )
                    except psycopg.Error:
                        if conn.broken:
                            raise  # its outcome is unknown: each request gets the error
                        self.commit_groups.stats.retried += 1
                    else:
                        for p, inserted in zip(items, counts, strict=True):
                            if not p.answer.done():
                                p.answer.set_result(inserted)
                        return
                for p in items:
                    await self._commit_alone(conn, p)

    async def _write_one(self, commit: StepCommit, ts: float) -> int:
        """One step on its own, in the caller's task (nothing else of this loop is in
        flight)."""
        pool = await self._ready()
        with _mapped("commit", self._where):
            async with pool.connection() as conn:
                return await self._send_step(conn, commit, ts)

    async def _commit_alone(self, conn: psycopg.AsyncConnection[Any], p: Pending) -> None:
        try:
            inserted = await self._send_step(conn, p.commit, p.ts)
        except Exception as exc:
            if not p.answer.done():
                p.answer.set_exception(exc)
        else:
            if not p.answer.done():
                p.answer.set_result(inserted)

    async def _send_step(
        self, conn: psycopg.AsyncConnection[Any], commit: StepCommit, ts: float
    ) -> int:
        """Send one step (one round trip); a refusal is explained from what the database
        holds now."""
        with _mapped("commit", self._where):
            try:
                return await self._steps.send(conn, commit, ts)
            except psycopg.Error as exc:
                await self._explain_failed_commit(conn, commit, exc)

    async def _explain_failed_commit(
        self, conn: psycopg.AsyncConnection[Any], commit: StepCommit, exc: psycopg.Error
    ) -> NoReturn:
        """The commit was rolled back: say why, from what the database holds now."""
        if isinstance(exc, pg_errors.DiskFull):  # no check failed: the disk did
            cause = " ".join(str(exc).split())
            cause = f"PostgreSQL at {self._where} is out of disk space ({cause})"
            raise StorageFullError(rows.full_message(commit, cause)) from exc
        cur = await conn.execute(THREAD_VERSION, (commit.thread_id,), prepare=False)
        row = await cur.fetchone()
        current = 0 if row is None else int(row[0])
        if current != commit.expected_version:  # the CAS is what failed
            raise StaleStateError(rows.stale_message(commit)) from exc
        creates = commit.new_run is not None and commit.new_run.run_id == commit.checkpoint.run_id
        if not creates and (commit.fence is not None or commit.run_status is not None):
            # (a run this commit inserts is missing because the commit failed: not the why)
            try:
                await self._raise_run_check(conn, commit.checkpoint.run_id, commit.fence)
            except (RunNotFoundError, LeaseLostError) as found:
                raise found from exc
            except StorageError:
                pass  # the run is fine: the failure was elsewhere
        if isinstance(exc, pg_errors.UniqueViolation):
            raise StorageError(_duplicate_message(exc, commit)) from exc
        raise exc

    async def _raise_run_check(
        self, conn: psycopg.AsyncConnection[Any], run_id: str, fence: int | None
    ) -> None:
        cur = await conn.execute(RUN_EXISTS, (run_id,), prepare=False)
        row = await cur.fetchone()
        if row is None:
            raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
        if fence is not None and int(row[0]) != fence:
            raise LeaseLostError(rows.lease_message(run_id, fence))
        raise StorageError(f"run {run_id!r} could not be updated; nothing was written")

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        row = await self._fetchone("get_thread", THREAD_SELECT, (thread_id,))
        return None if row is None else rows.thread_from_row(row)

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        """The thread and its latest run, read in one statement; runs of this loop that
        start together share it (:mod:`~oncegraph.storage.sql.pg_reads`)."""
        return await self.thread_reads.read(thread_id)

    async def _open_thread_alone(
        self, thread_id: str
    ) -> tuple[ThreadRecord | None, RunRecord | None]:
        row = await self._fetchone("open_thread", THREAD_OPENING, (thread_id, thread_id))
        return self.rows.thread_opening_from_row(row)

    async def _open_threads(self, thread_ids: Sequence[str]) -> list[Any]:
        return await self._fetchall("open_thread", THREAD_OPENINGS, (list(thread_ids),))

    def _thread_opening(self, row: Any) -> tuple[ThreadRecord | None, RunRecord | None]:
        return self.rows.thread_opening_from_row(row)

    async def open_run(self, run_id: str) -> tuple[RunRecord | None, ThreadRecord | None]:
        row = await self._fetchone("open_run", RUN_OPENING, (run_id,))
        return self.rows.run_opening_from_row(row)

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        if checkpoint_id is not None:
            row = await self._fetchone(
                "get_checkpoint", CHECKPOINT_SELECT, (thread_id, checkpoint_id)
            )
            return None if row is None else self.rows.checkpoint_from_row(row)
        row = await self._fetchone("get_checkpoint", CHECKPOINT_SELECT_HEAD, (thread_id,))
        return None if row is None else self.rows.checkpoint_from_row(row)

    async def request_hash_key(self) -> bytes:
        """The key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`), derived
        from the database secret: every process on this database computes the same."""
        key = self._hash_key
        if key is None:
            secret = await self._database_secret()
            key = self._hash_key = dbsecret.derive_key(secret, dbsecret.REQUEST_HASH_PURPOSE)
        return key

    async def _database_secret(self) -> bytes:
        """This database's secret (:mod:`~oncegraph.storage.sql.dbsecret`), created on first
        need; read once per store."""
        if self._secret is not None:
            return self._secret
        pool = await self._ready()
        with _mapped("read the database secret", self._where):
            async with pool.connection() as conn:
                await conn.execute(
                    SECRET_INSERT, (dbsecret.SECRET_NAME, dbsecret.new_secret(), now())
                )
                cur = await conn.execute(SECRET_SELECT, (dbsecret.SECRET_NAME,))
                row = await cur.fetchone()
        secret = dbsecret.secret_from_row(row, f"PostgreSQL {self._where}")
        self._secret = secret
        return secret

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        before_version: int | None = None,
    ) -> list[CheckpointRecord]:
        n = S.NO_LIMIT if limit is None else max(limit, 0)
        below = S.NO_LIMIT if before_version is None else before_version
        if run_id is None:
            found = await self._fetchall("list_checkpoints", CHECKPOINT_LIST, (thread_id, below, n))
        else:
            found = await self._fetchall(
                "list_checkpoints", CHECKPOINT_LIST_BY_RUN, (thread_id, run_id, below, n)
            )
        return [self.rows.checkpoint_from_row(r) for r in found]

    async def read_log(self, thread_id: str, channel: str, end: int) -> list[Any]:
        found = await self._fetchall("read_log", LOG_SELECT, (thread_id, channel, end))
        return self.rows.log_values(thread_id, channel, found)

    async def put_task_write(
        self, write: TaskWrite, *, run_id: str | None = None, fence: int | None = None
    ) -> None:
        params = self.rows.task_write_to_params(write)
        if fence is None:
            await self._execute("put_task_write", TASK_WRITE_UPSERT, params)
            return
        await self._fenced("put_task_write", TASK_WRITE_UPSERT_FENCED, params, run_id or "", fence)

    async def _fenced(
        self, op: str, sql: str, params: Sequence[Any], run_id: str, fence: int
    ) -> int:
        """A fenced write; zero rows is explained (unknown run, lost fence) or returned."""
        pool = await self._ready()
        with _mapped(op, self._where):
            async with pool.connection() as conn:
                cur = await conn.execute(sql, (*params, run_id, fence))
                if cur.rowcount == 1:
                    return 1
                await self._check_run(conn, run_id, fence)
                return 0

    async def _check_run(
        self, conn: psycopg.AsyncConnection[Any], run_id: str, fence: int
    ) -> None:
        """Raise if ``run_id`` is unknown or no longer held with ``fence``."""
        cur = await conn.execute(RUN_EXISTS, (run_id,), prepare=False)
        row = await cur.fetchone()
        if row is None:
            raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
        if int(row[0]) != fence:
            raise LeaseLostError(rows.lease_message(run_id, fence))

    async def get_task_writes(self, thread_id: str, checkpoint_id: str) -> list[TaskWrite]:
        found = await self._fetchall(
            "get_task_writes", TASK_WRITES_SELECT, (thread_id, checkpoint_id)
        )
        return [self.rows.task_write_from_row(r) for r in found]

    # -- runs ----------------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        try:
            sql = RUN_INSERT_NOTIFY if run.status is RunStatus.QUEUED else RUN_INSERT
            await self._execute("create_run", sql, self.rows.run_to_params(run))
        except StorageError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise StorageError(
                    f"run {run.run_id!r} already exists; nothing was written"
                ) from exc.__cause__
            raise

    async def get_run(self, run_id: str) -> RunRecord | None:
        row = await self._fetchone("get_run", RUN_SELECT, (run_id,))
        return None if row is None else self.rows.run_from_row(row)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        error: str | None = None,
        fence: int | None = None,
    ) -> None:
        pool = await self._ready()
        params = (str(status), self.rows.error_param(run_id, error), now(), run_id)
        with _mapped("update_run", self._where):
            async with pool.connection() as conn:
                if fence is None:
                    cur = await conn.execute(RUN_SET_STATUS, params)
                else:
                    cur = await conn.execute(RUN_SET_STATUS_FENCED, (*params, fence))
                if cur.rowcount != 1:
                    await self._raise_run_check(conn, run_id, fence)

    async def list_runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        limit: int = 100,
        app_id: str | None = None,
        tenant: str | None = None,
        parent_run_id: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunRecord]:
        wanted = [str(s) for s in statuses] if statuses is not None else []
        if statuses is not None and not wanted:
            return []

        async def read(sql: str, params: Sequence[Any]) -> list[Any]:
            return await self._fetchall("list_runs", _pg_listing(sql), params)

        shape, params = await self._listing.plan(
            read,
            thread_id=thread_id,
            statuses=wanted,
            app_id=app_id,
            tenant=tenant,
            limit=limit,
            parent_run_id=parent_run_id,
            before=before,
        )
        sql = _run_list(shape)
        return [self.rows.run_from_row(r) for r in await self._fetchall("list_runs", sql, params)]

    async def lock_run(self, run_id: str) -> PgRunLock | None:
        """The lock lives on this loop's lock session (no hop to another thread). A call
        that outlives its run hands it over to the home loop's session
        (:meth:`PgRunLock.outlive_loop`, :mod:`oncegraph.runtime.claim`), since the
        caller's loop may end (``asyncio.run`` returns) while the call is in flight."""
        session = await self._lock_session()
        with _mapped("lock_run", self._where):
            try:
                got = await session.try_lock(run_id)
            except psycopg.Error:
                await self._lock_sessions.aclose_current(_close_session, suppress=(psycopg.Error,))
                raise
        return PgRunLock(session, run_id, self._home_lock_session) if got else None

    async def _home_lock_session(self) -> LockSession:
        """The home loop's lock session (called there, by :class:`PgRunLock`)."""
        with _mapped("lock_run", self._where):
            return await self._lock_session()

    async def _lock_session(self) -> LockSession:
        session = self._lock_sessions.peek()
        if session is not None and session.broken:
            await self._lock_sessions.aclose_current(_close_session, suppress=(psycopg.Error,))
        if not self._schema_ok:
            await self._ready()
        return await self._lock_sessions.aget(self._open_lock_session)

    async def _open_lock_session(self) -> LockSession:
        self._opening_here()
        with _mapped("connect", self._where):
            return await LockSession.open(
                self._dsn, connect_timeout=self.connect_timeout, timeout=self.claim_timeout
            )

    async def fence_run(
        self,
        run_id: str,
        *,
        expected_token: int,
        owner: str | None,
        status: RunStatus | None = None,
        error: str | None = None,
        audit: AuditRecord | None = None,
    ) -> RunRecord | None:
        ts = now()
        params: tuple[Any, ...]
        if status is None:
            sql, params = RUN_FENCE, (owner, ts, run_id, expected_token)
        else:
            sql = RUN_FENCE_STATUS
            error = self.rows.error_param(run_id, error)
            params = (owner, str(status), error, ts, run_id, expected_token)
        key = None if audit is None else await self._chain_key()
        pool = await self._ready()
        with _mapped("fence_run", self._where):
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute(sql, params)
                row = await cur.fetchone()
                if row is None:
                    cur = await conn.execute(RUN_EXISTS, (run_id,))
                    if await cur.fetchone() is None:
                        raise RunNotFoundError(f"run {run_id!r} does not exist")
                    return None
                if audit is not None and key is not None:
                    await self._append_audit_in_tx(conn, audit, key)
        return self.rows.run_from_row(row)

    # -- effects -------------------------------------------------------------------------

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        params = self.rows.effect_to_params(record)
        pool = await self._ready()
        with _mapped("begin_effect", self._where, LedgerUnavailableError):
            async with pool.connection() as conn:
                if fence is None:
                    cur = await conn.execute(EFFECT_INSERT, params)
                else:
                    cur = await conn.execute(
                        EFFECT_INSERT_FENCED, (*params, record.run_id, fence)
                    )
                if await cur.fetchone() is not None:
                    return self.rows.effect_from_row(params), True
                if fence is not None:  # fenced out, or the record exists?
                    await self._check_run(conn, record.run_id, fence)
                # ON CONFLICT waited for the first writer to commit: its row is visible.
                cur = await conn.execute(EFFECT_SELECT, (record.effect_id,))
                row = await cur.fetchone()
        if row is None:  # pragma: no cover - effects are never deleted
            raise LedgerUnavailableError(
                f"effect {record.effect_id} conflicted on insert but cannot be read back"
            )
        return self.rows.effect_from_row(row), False

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._fetchone(
            "get_effect", EFFECT_SELECT, (effect_id,), cls=LedgerUnavailableError
        )
        return None if row is None else self.rows.effect_from_row(row)

    async def save_effect(
        self, record: EffectRecord, *, fence: int | None = None, audit: AuditRecord | None = None
    ) -> None:
        expected = record.row_version - 1
        if expected == 0:  # never begun: insert it (or update a row that was never written)
            sql, params = EFFECT_UPSERT_FIRST, self.rows.effect_to_params(record)
            if fence is not None:
                sql, params = EFFECT_UPSERT_FIRST_FENCED, (*params, record.run_id, fence)
        else:
            params = (*self.rows.effect_update_params(record), expected)
            sql = EFFECT_UPDATE_CAS
            if fence is not None:
                sql, params = EFFECT_UPDATE_CAS_FENCED, (*params, record.run_id, fence)
        key = None if audit is None else await self._chain_key()
        pool = await self._ready()
        with _mapped("save_effect", self._where):
            async with pool.connection() as conn:
                if audit is None:
                    cur = await conn.execute(sql, params)
                    written = cur.rowcount == 1
                else:
                    async with conn.transaction():
                        cur = await conn.execute(sql, params)
                        written = cur.rowcount == 1
                        if written and key is not None:
                            await self._append_audit_in_tx(conn, audit, key)
                if written:
                    return
                if fence is not None:
                    await self._check_run(conn, record.run_id, fence)
        raise StaleStateError(rows.effect_cas_message(record.effect_id, expected))

    async def list_effects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        statuses: Sequence[EffectStatus] | None = None,
        app_id: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[EffectRecord]:
        wanted = [str(s) for s in statuses] if statuses is not None else []
        if statuses is not None and not wanted:
            return []
        params: list[Any] = []
        if run_id is not None:
            params.append(run_id)
        if thread_id is not None:
            params.append(thread_id)
        params += wanted
        params += [f for f in (app_id, tenant) if f is not None]
        params += [S.NO_LIMIT if limit is None else max(limit, 0), max(offset, 0)]
        sql = _effect_list(
            run_id is not None,
            thread_id is not None,
            len(wanted),
            app_id is not None,
            tenant is not None,
        )
        found = await self._fetchall("list_effects", sql, params, cls=LedgerUnavailableError)
        return [self.rows.effect_from_row(r) for r in found]

    async def list_effect_payloads(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        results: bool = True,
        thread_ids: Sequence[str] | None = None,
    ) -> list[EffectPayload]:
        if thread_ids is not None and not thread_ids:
            return []
        params = [p for p in (run_id, thread_id) if p is not None]
        params += thread_ids or ()
        sql = _effect_payloads(
            run_id is not None, thread_id is not None, results, len(thread_ids or ())
        )
        found = await self._fetchall(
            "list_effect_payloads", sql, params, cls=LedgerUnavailableError
        )
        return [self.rows.payload_from_row(r) for r in found]

    # -- the audit log ---------------------------------------------------------------------

    async def append_audit(self, record: AuditRecord) -> None:
        key = await self._chain_key()
        pool = await self._ready()
        try:
            with _mapped("append_audit", self._where):
                async with pool.connection() as conn, conn.transaction():
                    await self._append_audit_in_tx(conn, record, key)
        except StorageError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise StorageError(
                    f"audit record {record.audit_id!r} already exists; nothing was written"
                ) from exc.__cause__
            raise

    async def _chain_key(self) -> chain.ChainKey:
        """The key new audit links are written with (:mod:`oncegraph.storage.auditchain`)."""
        return chain.chain_key(await self._audit_db_key(), self.rows.encryption)

    async def _audit_db_key(self) -> bytes:
        key = self._chain_db_key
        if key is None:
            secret = await self._database_secret()
            key = self._chain_db_key = dbsecret.derive_key(secret, chain.PURPOSE)
        return key

    async def _append_audit_in_tx(
        self, conn: Any, record: AuditRecord, key: chain.ChainKey
    ) -> None:
        """``record`` as the next link of the audit chain, in the open transaction: a
        transaction advisory lock serializes appends, so two never link to one head."""
        await conn.execute(chain.PG_LOCK)
        cur = await conn.execute(S.AUDIT_CHAIN_HEAD)
        seq, mac = chain.next_link(chain.head_from_row(await cur.fetchone()), record, key)
        await conn.execute(AUDIT_CHAINED_INSERT, (*self.rows.audit_to_params(record), seq, mac))

    async def verify_audit(self, *, page: int = 1000) -> chain.ChainReport:
        """Check the audit chain (:func:`oncegraph.storage.auditchain.verify`)."""
        db_key = await self._audit_db_key()
        row = await self._fetchone("verify_audit", S.AUDIT_UNCHAINED, ())
        latest = await self._fetchone("verify_audit", S.AUDIT_LATEST_UNCHAINED, ())
        found: list[chain.Chained] = []
        after = 0
        while True:
            batch = await self._fetchall("verify_audit", AUDIT_CHAIN_PAGE, (after, page))
            found.extend(self.rows.chained_audit(r) for r in batch)
            if len(batch) < page:
                break
            after = int(batch[-1][-2])
        return chain.verify(
            found,
            db_key=db_key,
            encryption=self.rows.encryption,
            unchained=int(row[0]),
            latest_unchained=None if latest is None else (latest[0], float(latest[1])),
        )

    async def list_audit(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        target_id: str | None = None,
        before: float | tuple[float, str] | None = None,
        limit: int = 100,
        app_id: str | None = None,
        tenant: str | None = None,
    ) -> list[AuditRecord]:
        sql, params = S.audit_query(run_id, thread_id, target_id, before, limit, app_id, tenant)
        found = await self._fetchall("list_audit", _pg(sql), params)
        return [self.rows.audit_from_row(r) for r in found]

    # -- idempotency keys ------------------------------------------------------------------

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        params = self.rows.request_to_params(record)
        pool = await self._ready()
        with _mapped("claim_request", self._where):
            async with pool.connection() as conn:
                cur = await conn.execute(REQUEST_CLAIM, params)
                if await cur.fetchone() is not None:
                    return self.rows.request_from_row(params), True
                # ON CONFLICT waited for the first claim to commit: its row is visible.
                cur = await conn.execute(REQUEST_SELECT, params[:2])
                row = await cur.fetchone()
        if row is None:  # pragma: no cover - the conflict row is only deleted when expired
            raise StorageError(f"idempotency key {record.key!r} conflicted but cannot be read")
        return self.rows.request_from_row(row), False

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = await self._fetchone("get_request", REQUEST_SELECT, (scope, key))
        return None if row is None else self.rows.request_from_row(row)

    async def finish_request(
        self, record: IdempotencyRecord, *, status_code: int, response: Mapping[str, Any]
    ) -> bool:
        params = (
            status_code,
            self.rows.response_param(record.scope, record.key, response),
            record.scope,
            record.key,
            record.created_at,
        )
        pool = await self._ready()
        with _mapped("finish_request", self._where):
            async with pool.connection() as conn:
                cur = await conn.execute(REQUEST_FINISH, params)
                return cur.rowcount == 1

    async def release_request(self, record: IdempotencyRecord) -> None:
        await self._execute(
            "release_request", REQUEST_RELEASE, (record.scope, record.key, record.created_at)
        )

    async def prune_requests(self, *, before: float) -> int:
        pool = await self._ready()
        with _mapped("prune_requests", self._where):
            async with pool.connection() as conn:
                cur = await conn.execute(REQUEST_PRUNE, (before,))
                return max(cur.rowcount, 0)

    # -- retention -----------------------------------------------------------------------

    async def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
        dry_run: bool = False,
        on_thread: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """See :meth:`oncegraph.storage.protocols.Pruner.prune`. One transaction per
        thread; the thread row is only read, so a racing commit's CAS never waits on it.
        Rows a racing commit inserts are invisible to the prune's statements and kept."""
        cutoff = prune_effects_cutoff(keep_checkpoints, effects_older_than)
        if thread_id is not None:
            report = await self._prune_thread(thread_id, keep_checkpoints, cutoff, dry_run)
            if on_thread is not None:
                on_thread(report)
            return report
        report = PruneReport()
        after: str | None = None
        while True:
            if after is None:
                page = await self._fetchall("prune", THREAD_IDS_FIRST, (_THREAD_PAGE,))
            else:
                page = await self._fetchall("prune", THREAD_IDS_AFTER, (after, _THREAD_PAGE))
            for (tid,) in page:
                one = await self._prune_thread(tid, keep_checkpoints, cutoff, dry_run)
                if on_thread is not None:
                    on_thread(one)
                report = report.plus(one)
            if len(page) < _THREAD_PAGE:
                return report
            after = page[-1][0]

    async def _prune_thread(
        self, thread_id: str, keep: int, cutoff: float | None, dry_run: bool = False
    ) -> PruneReport:
        pool = await self._ready()
        writes = effects = 0
        with _mapped("prune", self._where):
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute(THREAD_SELECT, (thread_id,))
                if await cur.fetchone() is None:
                    return PruneReport()
                cur = await conn.execute(
                    CHECKPOINT_PRUNE,
                    (thread_id, thread_id, keep, thread_id, *_KEEP_RUN_STATUSES),
                )
                doomed = await cur.fetchall()
                if doomed:
                    cur = conn.cursor()
                    await cur.executemany(
                        TASK_WRITES_DELETE, [(thread_id, cid) for (cid,) in doomed]
                    )
                    writes = max(cur.rowcount, 0)
                if cutoff is not None:
                    cur = await conn.execute(
                        EFFECT_PRUNE,
                        (
                            thread_id,
                            cutoff,
                            *_PRUNE_EFFECT_STATUSES,
                            *_PRUNE_EFFECT_RUN_STATUSES,
                        ),
                    )
                    effects = max(cur.rowcount, 0)
                if dry_run:
                    raise psycopg.Rollback()  # counted, not deleted
        return PruneReport(threads=1, checkpoints=len(doomed), task_writes=writes, effects=effects)

    # -- plumbing ------------------------------------------------------------------------

    async def _execute(self, op: str, sql: str, params: Sequence[Any]) -> None:
        pool = await self._ready()
        with _mapped(op, self._where):
            async with pool.connection() as conn:
                await conn.execute(sql, params)

    async def _fetchone(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> Any:
        pool = await self._ready()
        with _mapped(op, self._where, cls):
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchone()

    async def _fetchall(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> list[Any]:
        pool = await self._ready()
        with _mapped(op, self._where, cls):
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()

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
        _check_dsn(self._dsn)
        pool = _Pool(
            self._dsn,
            min_size=self.min_size,
            max_size=self.max_size,
            open=False,
            timeout=self.pool_timeout,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, round(self.connect_timeout)),
                # psycopg prepares a statement after 5 runs; None: never (see __init__)
                "prepare_threshold": 5 if self.prepared_statements else None,
            },
            name="oncegraph",
        )
        try:
            with _mapped("connect", self._where):
                await pool.open(wait=True, timeout=self.connect_timeout)
        except BaseException:
            await pool.close()
            raise
        return pool

    async def _migrate(self) -> int:
        """Apply what is missing under the advisory lock; returns how many were applied."""
        pool = await self._pool()
        where = f"PostgreSQL {self._where}"
        with _mapped("migrate", self._where):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(ADVISORY_XACT_LOCK, (MIGRATION_LOCK_KEY,))
                await conn.execute(M.CREATE_VERSION_TABLE)
                cur = await conn.execute(M.SELECT_VERSION)
                current = M.version_from_row(await cur.fetchone())
                steps = M.plan(current, where)
                for migration in steps:
                    for statement in migration.statements("postgres"):
                        await conn.execute(statement)
                    await conn.execute(INSERT_VERSION, migration.version_params())
        if steps:
            log.info("migrated %s from schema version %d to %d", where, current, LATEST_VERSION)
        return len(steps)


async def _close_pool(pool: AsyncConnectionPool) -> None:
    await pool.close()


async def _close_session(session: LockSession) -> None:
    await session.aclose()


def _drop_home(
    pools: LoopBound[AsyncConnectionPool], sessions: LoopBound[LockSession]
) -> None:
    """A store was garbage-collected unclosed: close what it opened on the home loop
    (there, without waiting), so its pool's tasks end instead of being destroyed."""
    loop = home_loop_if_running()
    if loop is None:
        return

    async def close() -> None:
        await sessions.aclose_all(_close_session, suppress=(psycopg.Error,))
        await pools.aclose_all(_close_pool, suppress=(psycopg.Error,))

    with contextlib.suppress(RuntimeError):
        asyncio.run_coroutine_threadsafe(close(), loop)


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


__all__ = ["MIGRATION_LOCK_KEY", "PgCheckpointer", "migrate", "verify"]

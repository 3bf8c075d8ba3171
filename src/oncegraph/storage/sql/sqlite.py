"""The embedded default store: SQLite through the standard library, WITH the ledger.

Durability and concurrency:

* WAL journal and ``synchronous=FULL`` by default: a committed intent or result
  survives a power loss. A faster setting (``"NORMAL"``) is the caller's explicit choice.
* One connection per store, opened lazily on first use (``check_same_thread=False``,
  guarded by a :class:`threading.Lock`), in autocommit mode (``isolation_level=None``)
  with explicit transactions. Every write runs in ``BEGIN IMMEDIATE``, so writers in
  several processes on one file queue on SQLite's lock (``busy_timeout``) instead of
  failing half-way; a read is one statement, hence one consistent snapshot.
* The schema is created or migrated once, when the connection opens, under
  ``BEGIN IMMEDIATE`` so racing processes never apply a migration twice. Nothing on the
  hot path checks the schema again.

Performance choice: the methods are ``async def`` but call sqlite3 directly instead of
going through ``asyncio.to_thread``. A WAL commit costs ~0.15 ms, far less than a
thread hop; the price is that a writer waiting on another process's lock blocks its
event loop for up to ``busy_timeout_ms``. Use PostgreSQL for many concurrent writers.

:meth:`SqliteCheckpointer.commit` joins the step commits of other runs on the same loop
that are ready in the same turn: one transaction and one fsync for the group, each step
checked before its first write (:mod:`oncegraph.storage.sql.sqlite_group`). A step is
written without a read (:mod:`oncegraph.storage.sql.sqlite_step`).
sqlite3 errors are mapped to :class:`~oncegraph.errors.StorageError` subclasses
(:func:`~oncegraph.storage.sql.sqlite_open.map_error`).

Every protocol method but the step commit and run locks is the shared store's
(:class:`~oncegraph.storage.sql.store.SqlStore`); this module is SQLite's dialect: the
connection, ``BEGIN IMMEDIATE``, group commit, file locks and the error map.

Run liveness locks (:meth:`SqliteCheckpointer.lock_run`) are OS record locks on the
sidecar file ``<database>-claims`` (:mod:`oncegraph.storage.filelocks`): the kernel
drops them when their process dies. Fenced writes check the run's token inside their
``BEGIN IMMEDIATE`` transaction, which serializes them with every other writer.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Unpack

from oncegraph.errors import (
    ConfigError,
    LeaseLostError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
    StorageFullError,
)
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.filelocks import FileRunLock, HeldRunLock, LockFile
from oncegraph.storage.records import AuditRecord, StepCommit, now
from oncegraph.storage.sql import rows
from oncegraph.storage.sql.sqlite_group import CommitGroups
from oncegraph.storage.sql.sqlite_open import (
    apply_migrations,
    check_schema,
    is_duplicate,
    map_error,
    migrate,
    open_db,
    rollback,
    verify,
)
from oncegraph.storage.sql.sqlite_step import StepWrite, apply_commit, check_run
from oncegraph.storage.sql.store import SqlStore
from oncegraph.storage.sql.store_port import FirstWrite, How, Tx

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


class _Tx:
    """A ``BEGIN IMMEDIATE`` transaction (:class:`~.store_port.Tx`): each method runs
    sqlite3 directly, never suspending, so the store's lock may be held across them."""

    __slots__ = ("conn", "discarded")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.discarded = False

    async def one(self, sql: str, params: Sequence[Any]) -> Any:
        found = self.conn.execute(sql, params).fetchall()
        return found[0] if found else None

    async def all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    async def count(self, sql: str, params: Sequence[Any]) -> int:
        return self.conn.execute(sql, params).rowcount

    async def count_many(self, sql: str, seq: Sequence[Sequence[Any]]) -> int:
        return self.conn.executemany(sql, seq).rowcount

    async def lock_audit(self) -> None:
        pass  # BEGIN IMMEDIATE already serializes every writer

    def discard(self) -> None:
        self.discarded = True


class SqliteCheckpointer(SqlStore):
    """A :class:`~oncegraph.storage.protocols.Checkpointer` on one SQLite file.

    ``path`` is a file path (``str`` or ``Path``) or ``":memory:"`` (private to this
    store, lost on :meth:`aclose`). ``synchronous`` is one of OFF, NORMAL, FULL, EXTRA.
    With ``auto_migrate=False`` an out-of-date schema raises StorageError naming
    ``oncegraph db migrate`` instead of migrating.

    ``encryption`` (an :class:`~oncegraph.storage.encryption.EncryptionKeys`) encrypts
    payloads, results and state at rest (:mod:`oncegraph.storage.encryption`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 30000,
        auto_migrate: bool = True,
        encryption: EncryptionKeys | None = None,
    ) -> None:
        sync = str(synchronous).upper()
        if sync not in _SYNCHRONOUS:
            raise ConfigError(
                f"synchronous={synchronous!r} is not a SQLite setting; use one of "
                f"{', '.join(_SYNCHRONOUS)} (FULL is the durable default)"
            )
        if busy_timeout_ms < 0:
            raise ConfigError("busy_timeout_ms must be >= 0")
        self.path = os.fspath(path)
        self.synchronous = sync
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.auto_migrate = auto_migrate
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._claims: LockFile | None = None
        self._memory_held: set[str] = set()  # ":memory:": no file, in-process locks
        # SQLite keeps no statistics of a status: its listing counts them first.
        self._init_port(rows.Rows(encryption), count_statuses=True)
        # Step commits ready in the same turn of a loop share one transaction and fsync.
        self.commit_groups = CommitGroups(
            self._lock,
            self._connect,
            self._map,
            refusals=(StaleStateError, LeaseLostError, RunNotFoundError),
        )

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({self.path!r}, synchronous={self.synchronous!r})"

    @property
    def _label(self) -> str:
        return f"SQLite {self.path}"

    # -- connection -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The open connection; opens it and sets up the schema once. Call under the lock."""
        conn = self._conn
        if conn is not None:
            return conn
        conn = open_db(self.path, self.synchronous, self.busy_timeout_ms)
        try:
            if self.auto_migrate:
                apply_migrations(conn, self.path)
            else:
                check_schema(conn, self.path)
        except sqlite3.Error as exc:
            conn.close()
            raise map_error(exc, self.path) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        # Closes the connection if the store is dropped or the interpreter exits first.
        self._finalizer = weakref.finalize(self, conn.close)
        return conn

    async def setup(self) -> None:
        """Open the connection and create or migrate the schema. Idempotent."""
        with self._lock:
            self._connect()

    async def aclose(self) -> None:
        """Close the connection; a later call opens it again (and re-checks the schema).

        Run locks still held stay held (their lock file closes with the last of them)."""
        with self._lock:
            self._conn = None
            if self._finalizer is not None:
                self._finalizer()  # closes the connection exactly once
                self._finalizer = None
            claims, self._claims = self._claims, None
        if claims is not None:
            claims.close()

    def _map(self, exc: sqlite3.Error) -> StorageError:
        return map_error(exc, self.path)

    @contextlib.contextmanager
    def _writing(
        self, cls: type[StorageError] = StorageError, duplicate: str | None = None
    ) -> Iterator[sqlite3.Connection]:
        """The connection in a write transaction (``BEGIN IMMEDIATE``), under the store's
        lock: committed when the block ends (unless the block ended it itself), rolled back
        when it raises, an ``sqlite3.Error`` raised as the matching ``StorageError``."""
        with self._lock:
            conn = self._connect()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                rollback(conn)
                if duplicate is not None and is_duplicate(exc):
                    raise StorageError(duplicate) from exc
                raise map_error(exc, self.path, cls) from exc
            except BaseException:
                rollback(conn)
                raise

    # -- the dialect's hooks (store_port) -----------------------------------------------

    async def _fetchall(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> list[Any]:
        with self._lock:
            conn = self._connect()
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise map_error(exc, self.path, cls) from exc

    async def _write(self, op: str, sql: str, params: Sequence[Any], **how: Unpack[How]) -> int:
        """One statement in its own write transaction, after the fence check."""
        fence, audit = how.get("fence"), how.get("audit")
        key = None if audit is None else await self._chain_key()
        with self._writing(duplicate=how.get("duplicate")) as conn:
            if fence is not None:
                check_run(conn, *fence)
            count = conn.execute(sql, params).rowcount
            if count and audit is not None and key is not None:
                await self._append_audit_in_tx(_Tx(conn), audit, key)
            return count

    async def _first_writer(
        self, op: str, w: FirstWrite, cls: type[StorageError] = StorageError
    ) -> tuple[bool, Any]:
        # Not grouped: an intent is written at once (no yield to the loop between the
        # call's decision and its intent), so sibling calls reach their intents in order.
        with self._writing(cls) as conn:
            if w.fence is not None:
                check_run(conn, *w.fence)
            if conn.execute(w.insert, w.params).fetchall():
                return True, None
            return False, conn.execute(w.select, w.key).fetchone()

    @contextlib.asynccontextmanager
    async def _transaction(
        self, op: str, *, duplicate: str | None = None, chained: bool = False
    ) -> AsyncIterator[Tx]:
        # ``chained`` changes nothing here: SQLite's write lock is this process's own
        with self._writing(duplicate=duplicate) as conn:
            tx = _Tx(conn)
            yield tx
            if tx.discarded:
                conn.execute("ROLLBACK")  # nothing is written; the counts stay

    # -- what is SQLite's own ---------------------------------------------------------

    async def append_audit(self, record: AuditRecord) -> None:
        """The next link of the audit chain, in the loop's next commit group (as a step
        commit is: durable when this returns, the chain's head read inside the group's
        transaction, in request order), not in a transaction and fsync of its own."""
        key = await self._chain_key()
        duplicate = f"audit record {record.audit_id!r} already exists; nothing was written"

        def write(conn: sqlite3.Connection) -> None:
            linking = self._append_audit_in_tx(_Tx(conn), record, key)
            try:  # _Tx never suspends: the coroutine finishes on its first step
                linking.send(None)
            except StopIteration:
                return
            except sqlite3.Error as exc:
                if is_duplicate(exc):  # the group rolls back and writes the others again
                    raise StorageError(duplicate) from exc
                raise
            linking.close()
            raise RuntimeError("an audit append suspended inside a commit group")

        await self.commit_groups.write(write)

    async def commit(self, commit: StepCommit) -> int:
        """One step's commit, grouped with the steps of other runs on this loop that
        commit in the same turn (:mod:`oncegraph.storage.sql.sqlite_group`): one
        transaction and one fsync for the group, each step's CAS and fence checked on its
        own, a refused step rolled back alone. Returns once its rows are durable."""
        rows.check_commit(commit)
        # Serialize before BEGIN: a JSON error never leaves a transaction open.
        work = StepWrite(
            commit,
            self.rows.checkpoint_to_params(commit.checkpoint),
            self.rows.log_params(commit.thread_id, commit.log) if commit.log else None,
            self.rows.run_to_params(commit.new_run) if commit.new_run is not None else None,
            [self.rows.effect_to_params(e) for e in commit.effects],
            [self.rows.effect_to_params(e) for e in commit.intents],
            self.rows.error_param(commit.checkpoint.run_id, commit.run_error),
            now(),
        )
        try:
            return await self.commit_groups.write(lambda conn: apply_commit(conn, work))
        except StorageFullError as exc:  # say what the lost step means for its run
            cause = f"SQLite {self.path} is full ({exc.__cause__ or exc})"
            raise StorageFullError(rows.full_message(commit, cause)) from exc

    async def lock_run(self, run_id: str) -> HeldRunLock | None:
        if self.path == ":memory:":  # private to this store: an in-process lock will do
            with self._lock:
                if run_id in self._memory_held:
                    return None
                self._memory_held.add(run_id)
            return HeldRunLock(self._memory_unlock, run_id)
        with self._lock:
            if self._claims is None:
                self._claims = LockFile.open(self.path + "-claims")
            claims = self._claims
        return FileRunLock(claims, run_id) if claims.try_lock(run_id) else None

    def _memory_unlock(self, run_id: str) -> None:
        with self._lock:
            self._memory_held.discard(run_id)


__all__ = ["SqliteCheckpointer", "migrate", "verify"]

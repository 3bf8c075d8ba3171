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
written without a read: the run's fenced ``UPDATE`` also checks the thread's version, so
its row count is the fence and the CAS at once (``INSERT ... ON CONFLICT DO NOTHING``
for a new thread), log entries go in with ``executemany``.
sqlite3 errors are mapped to :class:`~oncegraph.errors.StorageError` subclasses.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncegraph.errors import (
    ConfigError,
    LeaseLostError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
    StorageFullError,
)
from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.filelocks import FileRunLock, LockFile
from oncegraph.storage.lifecycle import Closing
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
from oncegraph.storage.sql import migrate as mig
from oncegraph.storage.sql import request_keys as R
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.listing import RunListing
from oncegraph.storage.sql.schema import SCHEMA_TABLE
from oncegraph.storage.sql.sqlite_group import CommitGroups

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_KEEP_RUN_STATUSES = tuple(sorted(str(s) for s in UNFINISHED_STATUSES))
_PRUNE_EFFECT_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_STATUSES)
_PRUNE_EFFECT_RUN_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_RUN_STATUSES)
_CHECKPOINT_PRUNE = S.checkpoint_prune(len(_KEEP_RUN_STATUSES))
_EFFECT_PRUNE = S.effect_prune(len(_PRUNE_EFFECT_STATUSES), len(_PRUNE_EFFECT_RUN_STATUSES))
_THREAD_PAGE = 500


def _map_error(exc: sqlite3.Error, path: str) -> StorageError:
    """Map a driver error to the error tree at the storage boundary."""
    text = str(exc)
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFullError(
            f"SQLite {path}: {text}; the write was rolled back and nothing of it was stored. "
            "Free space on the disk that holds the database (or raise its size limit), "
            "then try again"
        )
    if isinstance(exc, sqlite3.IntegrityError):
        return StorageError(f"SQLite {path}: {text}; nothing was written")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StorageError(
            f"SQLite {path}: {text} (another process held the write lock longer than "
            "busy_timeout_ms); nothing was written. Raise busy_timeout_ms or use PostgreSQL "
            "for many concurrent writers."
        )
    return StorageError(f"SQLite {path}: {type(exc).__name__}: {text}")


@dataclass(frozen=True, slots=True)
class _StepWrite:
    """A step commit with its parameters serialized (before any transaction opens)."""

    commit: StepCommit
    cp_params: Sequence[Any]
    log_params: Any
    run_params: Sequence[Any] | None
    effect_params: list[Any]
    intent_params: list[Any]
    ts: float


def _check_run(conn: sqlite3.Connection, run_id: str, fence: int | None) -> None:
    """In a write transaction, before any write: the run exists and (``fence``) is still
    held with that token; else ``RunNotFoundError`` / ``LeaseLostError``."""
    row = conn.execute(S.RUN_EXISTS, (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
    if fence is not None and int(row[0]) != fence:
        raise LeaseLostError(rows.lease_message(run_id, fence))


def _run_update(
    run_id: str, status: RunStatus | None, error: str | None, fence: int | None, ts: float
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters) that sets a run's status, checks its fence, or
    both; zero rows: no such run, or (``fence``) it is no longer held with that token."""
    if fence is None:
        if status is None:
            raise ValueError("a run update needs a status or a fence")
        return S.RUN_SET_STATUS, (str(status), error, ts, run_id)
    if status is None:
        return S.RUN_TOUCH_FENCED, (ts, run_id, fence)
    return S.RUN_SET_STATUS_FENCED, (str(status), error, ts, run_id, fence)


# Each run update, also checking the thread's version (its parameters, then thread_id and
# the expected version): a step's fence and compare-and-swap in one statement.
_IF_THREAD = {
    S.RUN_SET_STATUS: S.RUN_SET_STATUS + S.IF_THREAD_AT,
    S.RUN_TOUCH_FENCED: S.RUN_TOUCH_FENCED + S.IF_THREAD_AT,
    S.RUN_SET_STATUS_FENCED: S.RUN_SET_STATUS_FENCED + S.IF_THREAD_AT,
}


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the connection is broken; the transaction is gone anyway
            pass


_SIDE_FILES = ("-wal", "-shm", "-journal")


def _refuse_symlinks(path: str) -> None:
    """A database path that is a symbolic link is refused, never silently followed.

    A link would put every conversation wherever it points (another user's file, a
    shared directory). To use the target on purpose, pass the target's own path
    (``os.path.realpath(path)``): that is the explicit opt-in. SQLite's side files
    (``-wal``, ``-shm``, ``-journal``) are never links. Only the last component is
    checked: a linked directory (``/var`` on macOS) is the user's layout.
    """
    if os.path.islink(path):
        raise StorageError(
            f"SQLite database path {path!r} is a symbolic link (to "
            f"{os.readlink(path)!r}); oncegraph does not follow it silently. If you mean to "
            f"use the target, pass its own path: os.path.realpath({path!r})."
        )
    for suffix in _SIDE_FILES:
        if os.path.islink(path + suffix):
            raise StorageError(
                f"SQLite side file {path + suffix!r} is a symbolic link (to "
                f"{os.readlink(path + suffix)!r}); SQLite would write the database's "
                "journal there. Remove the link (with no process using the database)."
            )


def _create_private(path: str) -> None:
    """Create a missing database file with mode 0600 before SQLite writes anything.

    The file holds every conversation. ``O_EXCL | O_NOFOLLOW`` creates it ourselves
    (the umask can only remove bits from 0600); an existing file is left as it is.
    SQLite gives the ``-wal`` and ``-shm`` files it creates later the database file's
    permissions, so they are 0600 too.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorageError(
            f"cannot open SQLite database {path!r}: cannot create the file ({exc.strerror}). "
            "Check the directory exists and is writable."
        ) from exc
    os.close(fd)


def _open(path: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    if path not in ("", ":memory:"):
        _refuse_symlinks(path)
        _create_private(path)
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
    except sqlite3.Error as exc:
        raise StorageError(
            f"cannot open SQLite database {path!r}: {exc}. Check the directory exists and "
            "is writable."
        ) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL").fetchone()
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except sqlite3.Error as exc:
        conn.close()
        raise _map_error(exc, path) from exc
    return conn


def _read_version(conn: sqlite3.Connection) -> int:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (SCHEMA_TABLE,)
    ).fetchone()
    if found is None:
        return 0
    return mig.version_from_row(conn.execute(mig.SELECT_VERSION).fetchone())


def _apply_migrations(conn: sqlite3.Connection, path: str) -> mig.SchemaState:
    """Bring the schema to the latest version; a no-op read when it already is."""
    state = mig.verify(_read_version(conn), f"SQLite {path}")
    if state.up_to_date:
        return state
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(mig.CREATE_VERSION_TABLE)
        current = mig.version_from_row(conn.execute(mig.SELECT_VERSION).fetchone())
        for migration in mig.plan(current, f"SQLite {path}"):  # re-read under the lock
            for statement in migration.statements("sqlite"):
                conn.execute(statement)
            conn.execute(mig.INSERT_VERSION, migration.version_params())
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return mig.verify(_read_version(conn), f"SQLite {path}")


def _check_schema(conn: sqlite3.Connection, path: str) -> mig.SchemaState:
    state = mig.verify(_read_version(conn), f"SQLite {path}")
    if state.needs_migrate:
        raise StorageError(
            f"SQLite {path}: {state.describe()}; run `oncegraph db migrate --sqlite {path}` "
            "or pass auto_migrate=True"
        )
    return state


def _check_fence(conn: sqlite3.Connection, run_id: str, fence: int) -> None:
    """Inside a write transaction: raise unless ``run_id`` holds fencing token ``fence``."""
    row = conn.execute(S.RUN_EXISTS, (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
    if int(row[0]) != fence:
        raise LeaseLostError(rows.lease_message(run_id, fence))


class _HeldInProcess:
    """A run lock of a ``:memory:`` store (the store is private to its process)."""

    __slots__ = ("_held", "_lock", "run_id")

    def __init__(self, held: set[str], lock: threading.Lock, run_id: str) -> None:
        self._held = held
        self._lock = lock
        self.run_id = run_id

    @property
    def lost(self) -> bool:
        return False

    async def release(self) -> None:
        with self._lock:
            self._held.discard(self.run_id)


class SqliteCheckpointer(Closing):
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
        self._hash_key: bytes | None = None  # derived from the database secret on first need
        self._chain_db_key: bytes | None = None  # the same, for the audit chain
        self.rows = rows.Rows(encryption)  # the row codec, with encryption at rest if any
        self._listing = RunListing(count_statuses=True)  # no statistics of a status
        # Step commits ready in the same turn of a loop share one transaction and fsync.
        self.commit_groups = CommitGroups(
            self._lock,
            self._connect,
            self._map,
            refusals=(StaleStateError, LeaseLostError, RunNotFoundError),
        )

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({self.path!r}, synchronous={self.synchronous!r})"

    # -- connection -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """The open connection; opens it and sets up the schema once. Call under the lock."""
        conn = self._conn
        if conn is not None:
            return conn
        conn = _open(self.path, self.synchronous, self.busy_timeout_ms)
        try:
            if self.auto_migrate:
                _apply_migrations(conn, self.path)
            else:
                _check_schema(conn, self.path)
        except sqlite3.Error as exc:
            conn.close()
            raise _map_error(exc, self.path) from exc
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

    async def request_hash_key(self) -> bytes:
        """The key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`), derived
        from the database secret (:mod:`~oncegraph.storage.sql.dbsecret`), which the first
        process to need it creates: every process on this file computes the same key."""
        key = self._hash_key
        if key is None:
            secret = self._database_secret()
            key = self._hash_key = dbsecret.derive_key(secret, dbsecret.REQUEST_HASH_PURPOSE)
        return key

    def _database_secret(self) -> bytes:
        with self._writing() as conn:
            conn.execute(
                dbsecret.SECRET_INSERT, (dbsecret.SECRET_NAME, dbsecret.new_secret(), now())
            )
            row = conn.execute(dbsecret.SECRET_SELECT, (dbsecret.SECRET_NAME,)).fetchone()
        return dbsecret.secret_from_row(row, f"SQLite {self.path}")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
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
                _rollback(conn)
                raise _map_error(exc, self.path) from exc
            except BaseException:
                _rollback(conn)
                raise

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with self._lock:
            conn = self._connect()
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise _map_error(exc, self.path) from exc

    def _read_one(self, sql: str, params: Sequence[Any]) -> Any:
        rows = self._read(sql, params)  # key lookups: at most one row
        return rows[0] if rows else None

    def _write_one(
        self,
        sql: str,
        params: Sequence[Any],
        fence: tuple[str, int] | None = None,
        audit: AuditRecord | None = None,
    ) -> int:
        """One statement in its own write transaction, after the fence check; rowcount.
        ``audit`` is appended in the same transaction when the statement changed a row."""
        key = None if audit is None else self._chain_key()
        with self._writing() as conn:
            if fence is not None:
                _check_fence(conn, *fence)
            count = conn.execute(sql, params).rowcount
            if count and audit is not None and key is not None:
                self._append_audit_in_tx(conn, audit, key)
            return count

    # -- checkpoints ------------------------------------------------------------------

    async def commit(self, commit: StepCommit) -> int:
        """One step's commit, grouped with the steps of other runs on this loop that
        commit in the same turn (:mod:`oncegraph.storage.sql.sqlite_group`): one
        transaction and one fsync for the group, each step's CAS and fence checked on its
        own, a refused step rolled back alone. Returns once its rows are durable."""
        rows.check_commit(commit)
        # Serialize before BEGIN: a JSON error never leaves a transaction open.
        work = _StepWrite(
            commit,
            self.rows.checkpoint_to_params(commit.checkpoint),
            self.rows.log_params(commit.thread_id, commit.log) if commit.log else None,
            self.rows.run_to_params(commit.new_run) if commit.new_run is not None else None,
            [self.rows.effect_to_params(e) for e in commit.effects],
            [self.rows.effect_to_params(e) for e in commit.intents],
            now(),
        )
        try:
            return await self.commit_groups.write(lambda conn: self._apply_commit(conn, work))
        except StorageFullError as exc:  # say what the lost step means for its run
            cause = f"SQLite {self.path} is full ({exc.__cause__ or exc})"
            raise StorageFullError(rows.full_message(commit, cause)) from exc

    def _map(self, exc: sqlite3.Error) -> StorageError:
        return _map_error(exc, self.path)

    def _apply_commit(self, conn: sqlite3.Connection, work: _StepWrite) -> int:
        """One step's rows in the open transaction. Checks first: it refuses
        (``RunNotFoundError``, ``LeaseLostError``, then ``StaleStateError``) before it has
        written anything (the first write is the statement that checks), so a group needs
        no savepoint per step (:mod:`.sqlite_group`); any other failure comes after writes
        and rolls the group back. Returns the number of planned intents inserted."""
        commit = work.commit
        execute = conn.execute
        touches_run = commit.run_status is not None or commit.fence is not None
        if touches_run and work.run_params is None and commit.expected_version > 0:
            self._step_on_run(conn, work)
        else:
            self._step_on_thread(conn, work, touches_run)
        execute(S.CHECKPOINT_INSERT, work.cp_params)
        if work.log_params:
            conn.executemany(S.LOG_INSERT, work.log_params)
        inserted = 0
        if work.intent_params:  # ON CONFLICT DO NOTHING: rowcount sums the rows inserted
            inserted = conn.executemany(S.EFFECT_INTENT_INSERT, work.intent_params).rowcount
        if work.effect_params:
            conn.executemany(S.EFFECT_UPSERT_RESULT, work.effect_params)
        if commit.clear_task_writes_of is not None:
            execute(S.TASK_WRITES_DELETE, (commit.thread_id, commit.clear_task_writes_of))
        return inserted

    def _step_on_run(self, conn: sqlite3.Connection, work: _StepWrite) -> None:
        """A step of a run that exists, on a thread that exists (most steps): the run's
        update checks its fence AND the thread's version, one statement that writes
        nothing unless both hold; then the thread's update, which cannot miss. Zero rows:
        one read names the refusal (no run, a lost fence, else a lost CAS)."""
        commit, cp, ts = work.commit, work.commit.checkpoint, work.ts
        thread = (commit.thread_id, commit.expected_version)
        error = self.rows.error_param(cp.run_id, commit.run_error)
        sql, params = _run_update(cp.run_id, commit.run_status, error, commit.fence, ts)
        if conn.execute(_IF_THREAD[sql], (*params, *thread)).rowcount != 1:  # a refusal
            _check_run(conn, cp.run_id, commit.fence)
            raise StaleStateError(rows.stale_message(commit))
        new = (commit.expected_version + 1, cp.checkpoint_id, ts)
        if conn.execute(S.THREAD_CAS, (*new, *thread)).rowcount != 1:  # after a write
            raise StorageError(f"thread {commit.thread_id!r} changed under the write lock")

    def _step_on_thread(
        self, conn: sqlite3.Connection, work: _StepWrite, touches_run: bool
    ) -> None:
        """Any other step (a new thread, a new run, a step that leaves its run alone):
        the checks first (the run's, then the thread's CAS, its first write), then the
        run's insert or update."""
        commit, cp, ts = work.commit, work.commit.checkpoint, work.ts
        execute = conn.execute
        if touches_run and work.run_params is None:
            _check_run(conn, cp.run_id, commit.fence)
        if commit.expected_version == 0:
            cur = execute(S.THREAD_INSERT, (commit.thread_id, 1, cp.checkpoint_id, ts))
        else:
            cur = execute(
                S.THREAD_CAS,
                (
                    commit.expected_version + 1,
                    cp.checkpoint_id,
                    ts,
                    commit.thread_id,
                    commit.expected_version,
                ),
            )
        if cur.rowcount != 1:
            raise StaleStateError(rows.stale_message(commit))
        if work.run_params is not None:
            execute(S.RUN_INSERT, work.run_params)
        if touches_run:
            try:
                self._update_run_in_tx(
                    conn,
                    cp.run_id,
                    commit.run_status,
                    self.rows.error_param(cp.run_id, commit.run_error),
                    commit.fence,
                    ts,
                )
            except (RunNotFoundError, LeaseLostError) as exc:  # after writes: not a refusal
                raise StorageError(f"the run changed under the write lock: {exc}") from exc

    def _update_run_in_tx(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        status: RunStatus | None,
        error: str | None,
        fence: int | None,
        ts: float,
    ) -> None:
        """Status/fence update inside an open transaction; raises on zero rows."""
        if conn.execute(*_run_update(run_id, status, error, fence, ts)).rowcount == 1:
            return
        if conn.execute(S.RUN_EXISTS, (run_id,)).fetchone() is None:
            raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
        assert fence is not None
        raise LeaseLostError(rows.lease_message(run_id, fence))

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        row = self._read_one(S.THREAD_SELECT, (thread_id,))
        return None if row is None else rows.thread_from_row(row)

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        row = self._read_one(S.THREAD_OPENING, (thread_id, thread_id))
        return self.rows.thread_opening_from_row(row)

    async def open_run(self, run_id: str) -> tuple[RunRecord | None, ThreadRecord | None]:
        return self.rows.run_opening_from_row(self._read_one(S.RUN_OPENING, (run_id,)))

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        if checkpoint_id is None:
            row = self._read_one(S.CHECKPOINT_SELECT_HEAD, (thread_id,))
        else:
            row = self._read_one(S.CHECKPOINT_SELECT, (thread_id, checkpoint_id))
        return None if row is None else self.rows.checkpoint_from_row(row)

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
            found = self._read(S.CHECKPOINT_LIST, (thread_id, below, n))
        else:
            found = self._read(S.CHECKPOINT_LIST_BY_RUN, (thread_id, run_id, below, n))
        return [self.rows.checkpoint_from_row(r) for r in found]

    async def read_log(self, thread_id: str, channel: str, end: int) -> list[Any]:
        return self.rows.log_values(
            thread_id, channel, self._read(S.LOG_SELECT, (thread_id, channel, end))
        )

    async def put_task_write(
        self, write: TaskWrite, *, run_id: str | None = None, fence: int | None = None
    ) -> None:
        params = self.rows.task_write_to_params(write)
        self._write_one(
            S.TASK_WRITE_UPSERT, params, None if fence is None else (run_id or "", fence)
        )

    async def get_task_writes(self, thread_id: str, checkpoint_id: str) -> list[TaskWrite]:
        found = self._read(S.TASK_WRITES_SELECT, (thread_id, checkpoint_id))
        return [self.rows.task_write_from_row(r) for r in found]

    # -- runs -------------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        self._write_one(S.RUN_INSERT, self.rows.run_to_params(run))

    async def get_run(self, run_id: str) -> RunRecord | None:
        row = self._read_one(S.RUN_SELECT, (run_id,))
        return None if row is None else self.rows.run_from_row(row)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        error: str | None = None,
        fence: int | None = None,
    ) -> None:
        with self._writing() as conn:
            error = self.rows.error_param(run_id, error)
            self._update_run_in_tx(conn, run_id, status, error, fence, now())

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
        if statuses is not None and not statuses:
            return []

        async def read(sql: str, params: Sequence[Any]) -> list[Any]:
            return self._read(sql, params)

        shape, params = await self._listing.plan(
            read,
            thread_id=thread_id,
            statuses=[str(s) for s in statuses or ()],
            app_id=app_id,
            tenant=tenant,
            limit=limit,
            parent_run_id=parent_run_id,
            before=before,
        )
        sql = shape.sql()
        return [self.rows.run_from_row(r) for r in self._read(sql, params)]

    async def lock_run(self, run_id: str) -> FileRunLock | _HeldInProcess | None:
        if self.path == ":memory:":  # private to this store: an in-process lock will do
            with self._lock:
                if run_id in self._memory_held:
                    return None
                self._memory_held.add(run_id)
            return _HeldInProcess(self._memory_held, self._lock, run_id)
        with self._lock:
            if self._claims is None:
                self._claims = LockFile.open(self.path + "-claims")
            claims = self._claims
        return FileRunLock(claims, run_id) if claims.try_lock(run_id) else None

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
            sql, params = S.RUN_FENCE, (owner, ts, run_id, expected_token)
        else:
            sql = S.RUN_FENCE_STATUS
            error = self.rows.error_param(run_id, error)
            params = (owner, str(status), error, ts, run_id, expected_token)
        key = None if audit is None else self._chain_key()
        with self._writing() as conn:
            row = conn.execute(sql, params).fetchone()
            missing = row is None and conn.execute(S.RUN_EXISTS, (run_id,)).fetchone() is None
            if row is not None and audit is not None and key is not None:
                self._append_audit_in_tx(conn, audit, key)
        if missing:
            raise RunNotFoundError(f"run {run_id!r} does not exist")
        return None if row is None else self.rows.run_from_row(row)

    # -- effects ----------------------------------------------------------------------

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        params = self.rows.effect_to_params(record)
        # Not grouped: an intent is written at once (no yield to the loop between the
        # call's decision and its intent), so sibling calls reach their intents in order.
        with self._writing() as conn:
            if fence is not None:
                _check_fence(conn, record.run_id, fence)
            inserted = conn.execute(S.EFFECT_INSERT, params).fetchall()
            existing = (
                None
                if inserted
                else conn.execute(S.EFFECT_SELECT, (record.effect_id,)).fetchone()
            )
        if inserted:
            return self.rows.effect_from_row(params), True
        if existing is None:  # pragma: no cover - the conflict row cannot vanish in the tx
            raise StorageError(f"effect {record.effect_id!r} conflicted but cannot be read")
        return self.rows.effect_from_row(existing), False

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = self._read_one(S.EFFECT_SELECT, (effect_id,))
        return None if row is None else self.rows.effect_from_row(row)

    async def save_effect(
        self, record: EffectRecord, *, fence: int | None = None, audit: AuditRecord | None = None
    ) -> None:
        expected = record.row_version - 1
        if expected == 0:  # never begun: insert it (or update a row that was never written)
            sql, params = S.EFFECT_UPSERT_FIRST, self.rows.effect_to_params(record)
        else:
            sql, params = S.EFFECT_UPDATE_CAS, (*self.rows.effect_update_params(record), expected)
        fenced = None if fence is None else (record.run_id, fence)
        changed = self._write_one(sql, params, fenced, audit)
        if changed != 1:
            stored = self._read_one(S.EFFECT_SELECT, (record.effect_id,))
            version = "none" if stored is None else self.rows.effect_from_row(stored).row_version
            raise StaleStateError(
                rows.effect_cas_message(record.effect_id, expected)
                + f" (stored row version: {version})"
            )

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
        params: list[Any] = []
        if run_id is not None:
            params.append(run_id)
        if thread_id is not None:
            params.append(thread_id)
        if statuses is not None:
            if not statuses:
                return []
            params.extend(str(s) for s in statuses)
        params.extend(f for f in (app_id, tenant) if f is not None)
        sql = S.effect_list(
            by_run=run_id is not None,
            by_thread=thread_id is not None,
            n_statuses=len(statuses or ()),
            by_app=app_id is not None,
            by_tenant=tenant is not None,
        )
        params += [S.NO_LIMIT if limit is None else max(limit, 0), max(offset, 0)]
        return [self.rows.effect_from_row(r) for r in self._read(sql, params)]

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
        sql = S.effect_payloads(
            by_run=run_id is not None,
            by_thread=thread_id is not None,
            results=results,
            n_threads=len(thread_ids or ()),
        )
        return [self.rows.payload_from_row(r) for r in self._read(sql, params)]

    # -- the audit log ----------------------------------------------------------------

    async def append_audit(self, record: AuditRecord) -> None:
        key = self._chain_key()
        with self._writing() as conn:
            self._append_audit_in_tx(conn, record, key)

    def _chain_key(self) -> chain.ChainKey:
        """The key new audit links are written with (:mod:`oncegraph.storage.auditchain`)."""
        return chain.chain_key(self._audit_db_key(), self.rows.encryption)

    def _audit_db_key(self) -> bytes:
        key = self._chain_db_key
        if key is None:
            secret = self._database_secret()
            key = self._chain_db_key = dbsecret.derive_key(secret, chain.PURPOSE)
        return key

    def _append_audit_in_tx(
        self, conn: sqlite3.Connection, record: AuditRecord, key: chain.ChainKey
    ) -> None:
        """``record`` as the next link of the audit chain, in the open write transaction
        (which serializes appends)."""
        head = chain.head_from_row(conn.execute(S.AUDIT_CHAIN_HEAD).fetchone())
        seq, mac = chain.next_link(head, record, key)
        conn.execute(S.AUDIT_CHAINED_INSERT, (*self.rows.audit_to_params(record), seq, mac))

    async def verify_audit(self, *, page: int = 1000) -> chain.ChainReport:
        """Check the audit chain (:func:`oncegraph.storage.auditchain.verify`)."""
        db_key = self._audit_db_key()
        (unchained,) = self._read(S.AUDIT_UNCHAINED, ())[0]
        latest = self._read_one(S.AUDIT_LATEST_UNCHAINED, ())

        def found() -> Iterator[chain.Chained]:
            after = 0
            while True:
                batch = self._read(S.AUDIT_CHAIN_PAGE, (after, page))
                for row in batch:
                    yield self.rows.chained_audit(row)
                if len(batch) < page:
                    return
                after = int(batch[-1][-2])

        return chain.verify(
            found(),
            db_key=db_key,
            encryption=self.rows.encryption,
            unchained=int(unchained),
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
        return [self.rows.audit_from_row(r) for r in self._read(sql, params)]

    # -- idempotency keys ----------------------------------------------------------------

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        params = self.rows.request_to_params(record)
        with self._writing() as conn:
            claimed = conn.execute(R.REQUEST_CLAIM, params).fetchall()
            found = (
                None if claimed else conn.execute(R.REQUEST_SELECT, params[:2]).fetchone()
            )
        if claimed:
            return self.rows.request_from_row(params), True
        if found is None:  # pragma: no cover - the conflict row cannot vanish in the tx
            raise StorageError(f"idempotency key {record.key!r} conflicted but cannot be read")
        return self.rows.request_from_row(found), False

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = self._read_one(R.REQUEST_SELECT, (scope, key))
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
        return self._write_one(R.REQUEST_FINISH, params) == 1

    async def release_request(self, record: IdempotencyRecord) -> None:
        self._write_one(R.REQUEST_RELEASE, (record.scope, record.key, record.created_at))

    async def prune_requests(self, *, before: float) -> int:
        return max(self._write_one(R.REQUEST_PRUNE, (before,)), 0)

    # -- retention --------------------------------------------------------------------

    async def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
        dry_run: bool = False,
        on_thread: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """See :meth:`oncegraph.storage.protocols.Pruner.prune`. Each thread is pruned in
        its own ``BEGIN IMMEDIATE`` transaction, so writers wait at most one thread."""
        cutoff = prune_effects_cutoff(keep_checkpoints, effects_older_than)
        report = PruneReport()
        if thread_id is not None:
            report = self._prune_thread(thread_id, keep_checkpoints, cutoff, dry_run)
            if on_thread is not None:
                on_thread(report)
            return report
        after: str | None = None
        while True:
            if after is None:
                page = self._read(S.THREAD_IDS_FIRST, (_THREAD_PAGE,))
            else:
                page = self._read(S.THREAD_IDS_AFTER, (after, _THREAD_PAGE))
            for (tid,) in page:
                one = self._prune_thread(tid, keep_checkpoints, cutoff, dry_run)
                if on_thread is not None:
                    on_thread(one)
                report = report.plus(one)
            if len(page) < _THREAD_PAGE:
                return report
            after = page[-1][0]

    def _prune_thread(
        self, thread_id: str, keep: int, cutoff: float | None, dry_run: bool = False
    ) -> PruneReport:
        with self._writing() as conn:
            if conn.execute(S.THREAD_SELECT, (thread_id,)).fetchone() is None:
                return PruneReport()
            doomed = conn.execute(
                _CHECKPOINT_PRUNE,
                (thread_id, thread_id, keep, thread_id, *_KEEP_RUN_STATUSES),
            ).fetchall()
            writes = 0
            if doomed:
                cur = conn.executemany(
                    S.TASK_WRITES_DELETE, [(thread_id, cid) for (cid,) in doomed]
                )
                writes = cur.rowcount
            effects = 0
            if cutoff is not None:
                cur = conn.execute(
                    _EFFECT_PRUNE,
                    (
                        thread_id,
                        cutoff,
                        *_PRUNE_EFFECT_STATUSES,
                        *_PRUNE_EFFECT_RUN_STATUSES,
                    ),
                )
                effects = cur.rowcount
            if dry_run:
                conn.execute("ROLLBACK")  # nothing is written; the count stays
        return PruneReport(threads=1, checkpoints=len(doomed), task_writes=writes, effects=effects)


# -- sync helpers for the CLI (`oncegraph db migrate --sqlite PATH`) ----------------------


def migrate(path: str | os.PathLike[str], *, busy_timeout_ms: int = 30000) -> mig.SchemaState:
    """Create or migrate the schema of the SQLite file at ``path``; returns the new state."""
    where = os.fspath(path)
    conn = _open(where, "FULL", busy_timeout_ms)
    try:
        return _apply_migrations(conn, where)
    except sqlite3.Error as exc:
        raise _map_error(exc, where) from exc
    finally:
        conn.close()


def verify(path: str | os.PathLike[str]) -> mig.SchemaState:
    """Read the schema version of the SQLite file at ``path`` without changing anything.

    Raises StorageError if the file does not exist or was migrated by a newer oncegraph;
    ``state.needs_migrate`` tells whether ``migrate`` has work to do.
    """
    where = os.fspath(path)
    if where == ":memory:":
        return mig.verify(0, "SQLite :memory:")
    if not Path(where).exists():
        raise StorageError(
            f"no SQLite database at {where!r}; create it with `oncegraph db migrate --sqlite "
            f"{where}`"
        )
    try:
        conn = sqlite3.connect(Path(where).absolute().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise _map_error(exc, where) from exc
    try:
        return mig.verify(_read_version(conn), f"SQLite {where}")
    except sqlite3.Error as exc:
        raise _map_error(exc, where) from exc
    finally:
        conn.close()


__all__ = ["SqliteCheckpointer", "migrate", "verify"]

"""Opening a SQLite database file: the file's safety checks, the connection's settings,
the schema's migration, the error map, and the CLI's sync ``migrate`` / ``verify``.

The file is created 0600 before SQLite writes anything and a path that is a symbolic
link is refused (:func:`open_db`); the schema is migrated under ``BEGIN IMMEDIATE`` so
racing processes never apply a migration twice (:func:`apply_migrations`).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from oncegraph.errors import StorageError, StorageFullError
from oncegraph.storage.sql import migrate as mig
from oncegraph.storage.sql.schema import SCHEMA_TABLE


def map_error(
    exc: sqlite3.Error, path: str, cls: type[StorageError] = StorageError
) -> StorageError:
    """Map a driver error to the error tree at the storage boundary (``cls``, unless the
    disk is full)."""
    text = str(exc)
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StorageFullError(
            f"SQLite {path}: {text}; the write was rolled back and nothing of it was stored. "
            "Free space on the disk that holds the database (or raise its size limit), "
            "then try again"
        )
    if isinstance(exc, sqlite3.IntegrityError):
        return cls(f"SQLite {path}: {text}; nothing was written")
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return cls(
            f"SQLite {path}: {text} (another process held the write lock longer than "
            "busy_timeout_ms); nothing was written. Raise busy_timeout_ms or use PostgreSQL "
            "for many concurrent writers."
        )
    return cls(f"SQLite {path}: {type(exc).__name__}: {text}")


_UNIQUE = ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE")


def is_duplicate(exc: sqlite3.Error) -> bool:
    """A unique or primary key conflict."""
    return getattr(exc, "sqlite_errorname", None) in _UNIQUE


def rollback(conn: sqlite3.Connection) -> None:
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


def open_db(path: str, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
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
        raise map_error(exc, path) from exc
    return conn


def _read_version(conn: sqlite3.Connection) -> int:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (SCHEMA_TABLE,)
    ).fetchone()
    if found is None:
        return 0
    return mig.version_from_row(conn.execute(mig.SELECT_VERSION).fetchone())


def apply_migrations(conn: sqlite3.Connection, path: str) -> mig.SchemaState:
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
        rollback(conn)
        raise
    return mig.verify(_read_version(conn), f"SQLite {path}")


def check_schema(conn: sqlite3.Connection, path: str) -> mig.SchemaState:
    state = mig.verify(_read_version(conn), f"SQLite {path}")
    if state.needs_migrate:
        raise StorageError(
            f"SQLite {path}: {state.describe()}; run `oncegraph db migrate --sqlite {path}` "
            "or pass auto_migrate=True"
        )
    return state


# -- sync helpers for the CLI (`oncegraph db migrate --sqlite PATH`) ----------------------


def migrate(path: str | os.PathLike[str], *, busy_timeout_ms: int = 30000) -> mig.SchemaState:
    """Create or migrate the schema of the SQLite file at ``path``; returns the new state."""
    where = os.fspath(path)
    conn = open_db(where, "FULL", busy_timeout_ms)
    try:
        return apply_migrations(conn, where)
    except sqlite3.Error as exc:
        raise map_error(exc, where) from exc
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
        raise map_error(exc, where) from exc
    try:
        return mig.verify(_read_version(conn), f"SQLite {where}")
    except sqlite3.Error as exc:
        raise map_error(exc, where) from exc
    finally:
        conn.close()


__all__ = [
    "apply_migrations",
    "check_schema",
    "is_duplicate",
    "map_error",
    "migrate",
    "open_db",
    "rollback",
    "verify",
]

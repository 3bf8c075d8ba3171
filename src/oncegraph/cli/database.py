"""Which database a command works on, opened fast or refused with the fix.

The database is ``--database PATH_OR_DSN``, else ``--database-file FILE`` (a file holding
the DSN, so a password is not on the command line or in ``ps``), else the
``ONCEGRAPH_DATABASE`` environment variable (``--sqlite``/``--postgres`` are kept as
aliases). A value starting with ``postgresql://`` or ``postgres://``, or in libpq's
``key=value`` form (``host=... dbname=...``), is PostgreSQL; anything else is a SQLite path.

Invariants: opening never creates a database (only ``db migrate`` and ``demo`` do, on
purpose); every problem (missing file, a file that is not a database, an unparsable DSN,
a refused connection, a database that does not exist, a missing schema) is a
:class:`~oncegraph.cli.output.CliError` naming the cause and the fix, found with one
short connection attempt (``connect_timeout``) before any pool exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from oncegraph.cli.output import CliError
from oncegraph.errors import ConfigError, StorageError

ENV = "ONCEGRAPH_DATABASE"
CONNECT_TIMEOUT = 5  # seconds; libpq's minimum is 2
_KEY_VALUE = re.compile(r"^\s*[a-z_]+\s*=", re.IGNORECASE)
_EXTRA = 'PostgreSQL needs the postgres extra: pip install "oncegraph[postgres]"'


@dataclass(frozen=True, slots=True)
class Database:
    kind: Literal["sqlite", "postgres"]
    where: str  # a path, or a DSN (never printed: it may hold a password)

    def describe(self) -> str:
        if self.kind == "sqlite":
            return f"SQLite {self.where}"
        return f"PostgreSQL {_describe(self.where)}"


def classify(value: str) -> Database:
    text = value.strip()
    if text.startswith(("postgresql://", "postgres://")) or _KEY_VALUE.match(text):
        return Database("postgres", text)
    return Database("sqlite", value)


def choose(
    database: str | None,
    database_file: Path | None = None,
    sqlite: Path | None = None,
    postgres: str | None = None,
    *,
    required: bool = True,
) -> Database | None:
    """The database the flags (or the environment) name; CliError (exit 2) if ambiguous."""
    given = [x for x in (database, database_file, sqlite, postgres) if x is not None]
    if len(given) > 1:
        raise CliError(
            "give the database once: --database, --database-file, --sqlite or --postgres",
            code=2,
        )
    if database is not None:
        return classify(database)
    if sqlite is not None:
        return Database("sqlite", os.fspath(sqlite))
    if postgres is not None:
        return Database("postgres", postgres)
    if database_file is not None:
        return classify(_read_dsn_file(database_file))
    env = os.environ.get(ENV, "").strip()
    if env:
        return classify(env)
    if not required:
        return None
    raise CliError(
        f"no database given: pass --database PATH_OR_DSN (or --database-file FILE), or set "
        f"{ENV}",
        code=2,
    )


def _read_dsn_file(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise CliError(
            f"--database-file {os.fspath(path)}: cannot read it ({exc.strerror}); check the path",
            code=2,
        ) from None
    if not text:
        raise CliError(f"--database-file {os.fspath(path)} is empty; put the DSN in it", code=2)
    return text


# -- opening -------------------------------------------------------------------------------


def open_store(db: Database, encryption: Any = None) -> Any:
    """A checkpointer on an existing, migrated database (checked first; never created),
    with the key ring ``encryption`` if given."""
    if db.kind == "sqlite":
        check_sqlite(db.where)
        from oncegraph.storage.checkpointer import SqliteCheckpointer

        return SqliteCheckpointer(db.where, auto_migrate=False, encryption=encryption)
    check_postgres(db.where)
    from oncegraph.storage.sql.postgres import PgCheckpointer

    return PgCheckpointer(
        db.where,
        auto_migrate=False,
        max_size=4,
        connect_timeout=CONNECT_TIMEOUT,
        encryption=encryption,
    )


def check_store(store: Any) -> None:
    """The same checks for an app's own checkpointer (``--app``)."""
    path = getattr(store, "path", None)
    dsn = getattr(store, "_dsn", None)
    schema = not getattr(store, "auto_migrate", False)  # else the app migrates it itself
    if isinstance(path, str) and path != ":memory:":
        check_sqlite(path, schema=schema)
    elif isinstance(dsn, str):
        check_postgres(dsn, schema=schema)


@contextmanager
def storage_errors() -> Iterator[None]:
    """A storage error inside is the user's to act on: its message and exit 1, not a
    traceback."""
    try:
        yield
    except StorageError as exc:
        raise CliError(str(exc)) from None


def check_sqlite(path: str, *, schema: bool = True) -> None:
    """An existing SQLite database; ``schema``: with this oncegraph's schema."""
    from oncegraph.storage.sql import sqlite

    if not os.path.exists(path):
        raise CliError(
            f"no SQLite database at {path} (nothing was created). Check the path, or create "
            f"one with: oncegraph db migrate --database {path}"
        )
    if os.path.isdir(path):
        raise CliError(f"{path} is a directory, not a SQLite database file; check the path")
    try:
        state = sqlite.verify(path)
    except StorageError as exc:
        raise CliError(
            f"{path} cannot be read as a SQLite database ({exc}); check the path"
        ) from None
    if schema:
        _check_schema(state, f"SQLite {path}", path)


def check_postgres(dsn: str, *, schema: bool = True) -> None:
    """A reachable PostgreSQL database; ``schema``: with this oncegraph's schema."""
    try:
        import psycopg
    except ImportError:
        raise CliError(_EXTRA) from None
    from oncegraph.storage.sql import migrate as M
    from oncegraph.storage.sql.pg_pool import check_dsn
    from oncegraph.storage.sql.schema import SCHEMA_TABLE

    try:
        check_dsn(dsn)
    except (ConfigError, StorageError) as exc:
        raise CliError(str(exc), code=2) from None
    where = _describe(dsn)
    try:
        conn = psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    except psycopg.Error as exc:
        raise CliError(explain_connect(str(exc), dsn)) from None
    try:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (SCHEMA_TABLE,)).fetchone()
        current = 0
        if row is not None and row[0]:
            current = M.version_from_row(conn.execute(M.SELECT_VERSION).fetchone())
        state = M.verify(current, f"PostgreSQL {where}")
    except StorageError as exc:
        raise CliError(str(exc)) from None
    except psycopg.Error as exc:
        raise CliError(f"PostgreSQL {where}: {_first_line(str(exc))}") from None
    finally:
        conn.close()
    if schema:
        _check_schema(state, f"PostgreSQL {where}", "DSN")


def _check_schema(state: Any, where: str, shown: str) -> None:
    if state.current == 0:
        raise CliError(
            f"{where} has no oncegraph schema (not an oncegraph database, or never migrated). "
            f"Check the database, or create the schema with: oncegraph db migrate --database "
            f"{shown}"
        )
    if state.needs_migrate:
        raise CliError(f"{where}: {state.describe()}")


def explain_connect(message: str, dsn: str) -> str:
    """libpq's connection error as a cause and a fix (never the DSN: it may hold a password)."""
    info = _info(dsn)
    host = f"{info.get('host') or 'localhost'}:{info.get('port') or '5432'}"
    name = info.get("dbname") or info.get("user") or "?"
    text = message.lower()
    if "does not exist" in text and "database" in text:
        return (
            f"PostgreSQL database {name!r} does not exist at {host}. Create it "
            f"(createdb -h {host.split(':')[0]} -p {host.split(':')[1]} {name}) or fix the "
            "dbname in the DSN."
        )
    if "connection refused" in text:
        return (
            f"cannot connect to PostgreSQL at {host}: connection refused. Start the server, "
            "or fix the host and port in the DSN."
        )
    if "timeout expired" in text or "timed out" in text:
        return (
            f"no answer from PostgreSQL at {host} within {CONNECT_TIMEOUT}s. Check the host, "
            "the port and any firewall."
        )
    if "translate host name" in text or "name or service not known" in text:
        return f"unknown PostgreSQL host in the DSN ({host}); fix the host name."
    if "authentication failed" in text or "password" in text:
        return (
            f"PostgreSQL at {host} refused the login for database {name!r}: "
            f"{_first_line(message)}. Check the user and password (keep them in a file: "
            "--database-file)."
        )
    return f"cannot connect to PostgreSQL at {host}: {_first_line(message)}"


def _first_line(message: str) -> str:
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    return lines[0] if lines else "unknown error"


def _info(dsn: str) -> dict[str, Any]:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return dict(conninfo_to_dict(dsn))
    except Exception:
        return {}


def _describe(dsn: str) -> str:
    info = _info(dsn)
    return (
        f"database {info.get('dbname', '?')!r} at "
        f"{info.get('host') or 'localhost'}:{info.get('port') or '5432'}"
    )


__all__ = [
    "ENV",
    "Database",
    "check_store",
    "choose",
    "classify",
    "open_store",
    "storage_errors",
]

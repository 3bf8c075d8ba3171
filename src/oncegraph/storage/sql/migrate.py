"""Dialect-neutral migration logic over :data:`~oncegraph.storage.sql.schema.MIGRATIONS`.

Pure data and functions, no I/O: a sync (sqlite3) and an async (psycopg) caller both
drive it the same way, inside ONE write transaction that serializes racing processes
(SQLite ``BEGIN IMMEDIATE``; PostgreSQL an advisory transaction lock)::

    execute(CREATE_VERSION_TABLE)
    current = version_from_row(fetchone(SELECT_VERSION))
    for migration in plan(current):
        for statement in migration.statements(dialect):
            execute(statement)
        execute(INSERT_VERSION, migration.version_params())
    commit

The version table holds one row per applied migration; the schema version is the
largest. Invariants: migrations are applied in order, each exactly once (the version
column is the primary key, so a racing double apply fails instead of passing
silently); a database NEWER than this code is never touched, and :func:`plan` and
:func:`verify` raise :class:`~oncegraph.errors.StorageError` naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncegraph.errors import StorageError
from oncegraph.storage.records import now
from oncegraph.storage.sql.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    SCHEMA_TABLE,
    Dialect,
    Step,
)

CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} ("
    "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
)
SELECT_VERSION = f"SELECT MAX(version) FROM {SCHEMA_TABLE}"
INSERT_VERSION = f"INSERT INTO {SCHEMA_TABLE} (version, applied_at) VALUES (?, ?)"


@dataclass(frozen=True, slots=True)
class Migration:
    """One entry of MIGRATIONS: its 1-based ``version`` and its DDL steps."""

    version: int
    steps: tuple[Step, ...]

    def statements(self, dialect: Dialect) -> tuple[str, ...]:
        """The statements to run, in order, on a database of ``dialect``."""
        out: list[str] = []
        for step in self.steps:
            out.extend((step,) if isinstance(step, str) else step.statements(dialect))
        return tuple(out)

    def version_params(self) -> tuple[int, float]:
        """Parameters for :data:`INSERT_VERSION` once the statements have run."""
        return (self.version, now())


@dataclass(frozen=True, slots=True)
class SchemaState:
    """What :func:`verify` found: the database's version and whether it is current."""

    current: int
    latest: int

    @property
    def up_to_date(self) -> bool:
        return self.current == self.latest

    @property
    def needs_migrate(self) -> bool:
        return self.current < self.latest

    def describe(self) -> str:
        if self.up_to_date:
            return f"schema version {self.current} (up to date)"
        return (
            f"schema version {self.current}, this oncegraph needs {self.latest}: "
            "run `oncegraph db migrate` (or set up the store with auto_migrate=True)"
        )


def version_from_row(row: Any) -> int:
    """The schema version from a :data:`SELECT_VERSION` row (``None`` or ``(None,)`` = 0)."""
    if row is None or row[0] is None:
        return 0
    return int(row[0])


def too_new_error(current: int, where: str = "the database") -> StorageError:
    return StorageError(
        f"{where} has schema version {current}, but this oncegraph only knows versions up "
        f"to {LATEST_VERSION}: it was migrated by a newer oncegraph. Upgrade oncegraph "
        '(pip install -U "oncegraph") in every process that uses it; nothing was changed.'
    )


def verify(current: int, where: str = "the database") -> SchemaState:
    """Judge a database's schema version. Newer than the code raises StorageError."""
    if current < 0:
        raise StorageError(f"{where} has an invalid schema version {current}")
    if current > LATEST_VERSION:
        raise too_new_error(current, where)
    return SchemaState(current=current, latest=LATEST_VERSION)


def plan(current: int, where: str = "the database") -> tuple[Migration, ...]:
    """The migrations to apply, in order, to bring ``current`` to the latest version."""
    verify(current, where)
    return tuple(
        Migration(version=i + 1, steps=MIGRATIONS[i]) for i in range(current, LATEST_VERSION)
    )


def needs_migrate_error(state: SchemaState, where: str = "the database") -> StorageError:
    """The error a store raises when it may not migrate by itself (auto_migrate=False)."""
    return StorageError(f"{where}: {state.describe()}")


__all__ = [
    "CREATE_VERSION_TABLE",
    "INSERT_VERSION",
    "SELECT_VERSION",
    "Migration",
    "SchemaState",
    "needs_migrate_error",
    "plan",
    "too_new_error",
    "verify",
    "version_from_row",
]

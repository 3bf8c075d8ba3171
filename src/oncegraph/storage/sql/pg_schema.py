"""PostgreSQL's schema version: read it (tolerating a database the schema table was
never created in), and apply the missing migrations under ``pg_advisory_xact_lock``, so
processes starting at once apply each migration exactly once."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from oncegraph.storage.sql import migrate as M
from oncegraph.storage.sql.pg_tx import pg
from oncegraph.storage.sql.schema import LATEST_VERSION, SCHEMA_TABLE

log = logging.getLogger("oncegraph.storage.postgres")

INSERT_VERSION = pg(M.INSERT_VERSION)
ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock(%s)"
SCHEMA_TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"
# "oncegraph" in ASCII, as a signed 64-bit advisory lock key shared by all processes.
MIGRATION_LOCK_KEY = int.from_bytes(b"\x00oncegrph", "big", signed=True)


async def read_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The schema version the database holds (0: never migrated)."""
    cur = await conn.execute(SCHEMA_TABLE_EXISTS, (SCHEMA_TABLE,))
    exists = await cur.fetchone()
    if exists is None or not exists[0]:
        return 0
    cur = await conn.execute(M.SELECT_VERSION)
    return M.version_from_row(await cur.fetchone())


async def apply_missing(conn: psycopg.AsyncConnection[Any], where: str) -> int:
    """Apply what is missing in one transaction holding the migration lock, the version
    re-read under it; returns how many migrations were applied."""
    async with conn.transaction():
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


__all__ = ["MIGRATION_LOCK_KEY", "apply_missing", "read_version"]

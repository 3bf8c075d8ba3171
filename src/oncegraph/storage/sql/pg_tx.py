"""PostgreSQL's side of the shared store's port (:mod:`.store_port`): the shared
statements in psycopg's placeholder style, their fenced forms, and a transaction on one
connection (:class:`PgTx`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import psycopg

from oncegraph.storage import auditchain as chain
from oncegraph.storage.sql import statements as S


@lru_cache(maxsize=512)
def pg(sql: str) -> str:
    """A shared statement (``?`` placeholders) in psycopg's style, converted once."""
    return S.to_format_params(sql)


# A fenced write is the same statement with the run's token checked in it (the fence's
# ``run_id, token`` appended to its parameters): one statement, no read before it.
FENCED = {
    S.TASK_WRITE_UPSERT: S.TASK_WRITE_UPSERT_FENCED,
    S.EFFECT_INSERT: S.EFFECT_INSERT_FENCED,
    S.EFFECT_UPSERT_FIRST: S.EFFECT_UPSERT_FIRST_FENCED,
    S.EFFECT_UPDATE_CAS: S.EFFECT_UPDATE_CAS_FENCED,
}


class PgTx:
    """A transaction on one connection (:class:`~.store_port.Tx`)."""

    __slots__ = ("conn", "discarded")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.discarded = False

    async def one(self, sql: str, params: Sequence[Any]) -> Any:
        cur = await self.conn.execute(pg(sql), params)
        return await cur.fetchone()

    async def all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        cur = await self.conn.execute(pg(sql), params)
        return await cur.fetchall()

    async def count(self, sql: str, params: Sequence[Any]) -> int:
        cur = await self.conn.execute(pg(sql), params)
        return cur.rowcount

    async def count_many(self, sql: str, seq: Sequence[Sequence[Any]]) -> int:
        cur = self.conn.cursor()
        await cur.executemany(pg(sql), seq)
        return cur.rowcount

    async def lock_audit(self) -> None:
        await self.conn.execute(chain.PG_LOCK)  # a transaction advisory lock

    def discard(self) -> None:
        self.discarded = True


__all__ = ["FENCED", "PgTx", "pg"]

"""``AsyncPostgresSaver``: the same PostgreSQL store (sync and async alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncegraph.checkpoint._lazy import postgres_store

if TYPE_CHECKING:
    from oncegraph.storage.sql.postgres import PgCheckpointer as AsyncPostgresSaver

__all__ = ["AsyncPostgresSaver"]


__getattr__ = postgres_store(__name__, "AsyncPostgresSaver")

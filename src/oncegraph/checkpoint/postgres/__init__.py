"""``PostgresSaver``: oncegraph's PostgreSQL store (the ``postgres`` extra; takes a DSN).
Imported on first use, so this module imports without psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncegraph.checkpoint._lazy import postgres_store

if TYPE_CHECKING:
    from oncegraph.storage.sql.postgres import PgCheckpointer as PostgresSaver

__all__ = ["PostgresSaver"]


__getattr__ = postgres_store(__name__, "PostgresSaver")

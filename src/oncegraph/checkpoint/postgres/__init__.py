"""``PostgresSaver``: oncegraph's PostgreSQL store (the ``postgres`` extra; takes a DSN).
Imported on first use, so this module imports without psycopg."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncegraph.storage.sql.postgres import PgCheckpointer as PostgresSaver

__all__ = ["PostgresSaver"]


def __getattr__(name: str) -> Any:
    if name == "PostgresSaver":
        from oncegraph.storage import checkpointer

        return checkpointer.PgCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

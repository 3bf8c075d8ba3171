"""``AsyncPostgresSaver``: the same PostgreSQL store (sync and async alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncegraph.storage.sql.postgres import PgCheckpointer as AsyncPostgresSaver

__all__ = ["AsyncPostgresSaver"]


def __getattr__(name: str) -> Any:
    if name == "AsyncPostgresSaver":
        from oncegraph.storage import checkpointer

        return checkpointer.PgCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

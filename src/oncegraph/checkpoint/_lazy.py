"""The module ``__getattr__`` of the PostgreSQL twins: the store is imported on first use,
so ``oncegraph.checkpoint.postgres`` (and ``.aio``) import without psycopg."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def postgres_store(module: str, name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers ``name`` with the PostgreSQL store class."""

    def __getattr__(attr: str) -> Any:
        if attr == name:
            from oncegraph.storage import checkpointer

            return checkpointer.PgCheckpointer
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return __getattr__

"""The public import point for checkpointers::

    from oncegraph.storage.checkpointer import (
        InMemoryCheckpointer, SqliteCheckpointer, PgCheckpointer, EncryptionKeys,
    )

Every store takes ``encryption=EncryptionKeys({...}, current=...)`` for encryption at
rest (:mod:`oncegraph.storage.encryption`, the ``encryption`` extra).

``PgCheckpointer`` is imported lazily (module ``__getattr__``) so that importing this
module never requires psycopg; without it, touching ``PgCheckpointer`` raises
ImportError with the install hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.memory import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.sql.sqlite import SqliteCheckpointer

if TYPE_CHECKING:
    from oncegraph.storage.sql.postgres import PgCheckpointer

_PG_HINT = 'PgCheckpointer needs psycopg 3 and psycopg_pool: pip install "oncegraph[postgres]"'


def __getattr__(name: str) -> Any:
    if name == "PgCheckpointer":
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            raise ImportError(_PG_HINT, name=exc.name) from exc
        from oncegraph.storage.sql.postgres import PgCheckpointer

        return PgCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Checkpointer",
    "EncryptionKeys",
    "InMemoryCheckpointer",
    "PgCheckpointer",
    "SqliteCheckpointer",
]

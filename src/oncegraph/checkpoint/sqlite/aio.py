"""``AsyncSqliteSaver``: the same SQLite store (each oncegraph store is sync and async)."""

from oncegraph.storage.sql.sqlite import SqliteCheckpointer

AsyncSqliteSaver = SqliteCheckpointer

__all__ = ["AsyncSqliteSaver"]

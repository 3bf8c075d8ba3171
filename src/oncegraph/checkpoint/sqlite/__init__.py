"""``SqliteSaver``: oncegraph's SQLite store (``SqliteSaver("runs.db")``: a file path)."""

from oncegraph.storage.sql.sqlite import SqliteCheckpointer

SqliteSaver = SqliteCheckpointer

__all__ = ["SqliteSaver"]

"""``SqliteCache``: node results in a SQLite file (``path=":memory:"``: this process)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence

from oncegraph.cache.base import BaseCache, CacheKey, Namespace, expired, expiry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS oncegraph_cache (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (ns, key)
)
"""


class SqliteCache(BaseCache):
    """A cache in the table ``oncegraph_cache`` of the SQLite database at ``path``."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute(_SCHEMA)

    def get(self, keys: Sequence[CacheKey]) -> dict[CacheKey, str]:
        out: dict[CacheKey, str] = {}
        with self._lock:
            for ns, key in keys:
                row = self._db.execute(
                    "SELECT value, expires_at FROM oncegraph_cache WHERE ns = ? AND key = ?",
                    (_ns(ns), key),
                ).fetchone()
                if row is None:
                    continue
                if expired(row[1]):
                    self._db.execute(
                        "DELETE FROM oncegraph_cache WHERE ns = ? AND key = ?", (_ns(ns), key)
                    )
                    continue
                out[(ns, key)] = row[0]
        return out

    def set(self, entries: Mapping[CacheKey, tuple[str, float | None]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO oncegraph_cache (ns, key, value, expires_at) "
                "VALUES (?, ?, ?, ?)",
                [(_ns(ns), key, v, expiry(ttl)) for (ns, key), (v, ttl) in entries.items()],
            )

    def clear(self, namespaces: Iterable[Namespace] | None = None) -> None:
        with self._lock:
            if namespaces is None:
                self._db.execute("DELETE FROM oncegraph_cache")
                return
            self._db.executemany(
                "DELETE FROM oncegraph_cache WHERE ns = ?", [(_ns(n),) for n in namespaces]
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _ns(ns: Namespace) -> str:
    return json.dumps(list(ns))


__all__ = ["SqliteCache"]

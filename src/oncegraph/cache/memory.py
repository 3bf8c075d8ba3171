"""``InMemoryCache``: node results kept in this process (lost when it ends)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

from oncegraph.cache.base import BaseCache, CacheKey, Namespace, expired, expiry


class InMemoryCache(BaseCache):
    """A cache in a dict of this process; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[CacheKey, tuple[str, float | None]] = {}

    def get(self, keys: Sequence[CacheKey]) -> dict[CacheKey, str]:
        out: dict[CacheKey, str] = {}
        with self._lock:
            for key in keys:
                found = self._data.get(key)
                if found is None:
                    continue
                if expired(found[1]):
                    del self._data[key]
                    continue
                out[key] = found[0]
        return out

    def set(self, entries: Mapping[CacheKey, tuple[str, float | None]]) -> None:
        with self._lock:
            for key, (value, ttl) in entries.items():
                self._data[key] = (value, expiry(ttl))

    def clear(self, namespaces: Iterable[Namespace] | None = None) -> None:
        with self._lock:
            if namespaces is None:
                self._data.clear()
                return
            drop = set(namespaces)
            for key in [k for k in self._data if k[0] in drop]:
                del self._data[key]


__all__ = ["InMemoryCache"]

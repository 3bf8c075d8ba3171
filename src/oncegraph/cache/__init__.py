"""Node result caches: ``compile(cache=InMemoryCache())`` with
``add_node(..., cache_policy=CachePolicy())`` (:mod:`oncegraph.cache.base`)."""

from oncegraph.cache.base import BaseCache, CachePolicy, default_cache_key
from oncegraph.cache.memory import InMemoryCache
from oncegraph.cache.sqlite import SqliteCache

__all__ = ["BaseCache", "CachePolicy", "InMemoryCache", "SqliteCache", "default_cache_key"]

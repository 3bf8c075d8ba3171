"""Checks of the node cache's arguments (``add_node(cache_policy=)``, ``compile(cache=)``)."""

from __future__ import annotations

from typing import Any

from oncegraph.cache.base import BaseCache, CachePolicy
from oncegraph.errors import GraphValidationError


def checked_policy(where: str, policy: Any) -> CachePolicy | None:
    if policy is None or isinstance(policy, CachePolicy):
        return policy
    raise GraphValidationError(
        f"{where}: cache_policy={policy!r} is not a CachePolicy; pass "
        "cache_policy=CachePolicy() (from oncegraph.types or oncegraph.cache)"
    )


def checked_cache(cache: Any) -> BaseCache | None:
    if cache is None or isinstance(cache, BaseCache):
        return cache
    raise GraphValidationError(
        f"compile(cache={cache!r}): not a cache; pass an oncegraph.cache InMemoryCache() "
        "or SqliteCache(path=...)"
    )


__all__ = ["checked_cache", "checked_policy"]

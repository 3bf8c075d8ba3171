"""A cache of node results (``compile(cache=...)``, ``add_node(cache_policy=...)``).

A cache maps ``(namespace, key)`` to a stored value with an optional time to live. The
namespace is ``(graph name, node name)``; the key is what the node's
:class:`CachePolicy` ``key_func`` makes of the node's input (by default a hash of its
pickled input, as LangGraph keys it). What is stored is the node's returned update in
oncegraph's JSON form.

Under the effect ledger a cached result is only a repeatable computation: a node whose
run performed an effect (a tool call, ``effect()``, a ``@task``) or ran a subgraph is
never stored, so a cache hit never stands in for a call the ledger must record or serve.
"""

from __future__ import annotations

import hashlib
import pickle
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Namespace = tuple[str, ...]
CacheKey = tuple[Namespace, str]


def default_cache_key(*args: Any, **kwargs: Any) -> str:
    """A stable key of a node's input: a hash of it pickled (dicts in key order)."""
    try:
        data = pickle.dumps((_frozen(args), _frozen(kwargs)), protocol=5)
    except Exception:  # not picklable: its repr stands for it
        data = repr((args, kwargs)).encode()
    return hashlib.sha256(data).hexdigest()


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted(((str(k), _frozen(v)) for k, v in value.items()), key=lambda p: p[0]))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted((_frozen(v) for v in value), key=repr))
    return value


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """How a node's results are cached: ``key_func`` makes the key of its input
    (default :func:`default_cache_key`), ``ttl`` is how long an entry lives, in
    seconds (None: until the cache is cleared)."""

    key_func: Callable[..., Hashable] = default_cache_key
    ttl: float | None = None

    def key(self, *args: Any, **kwargs: Any) -> str:
        made = self.key_func(*args, **kwargs)
        if isinstance(made, bytes):
            return hashlib.sha256(made).hexdigest()
        return str(made)


class BaseCache:
    """What a cache implements: :meth:`get`, :meth:`set`, :meth:`clear` (the async
    ``aget`` / ``aset`` / ``aclear`` call them). Values are JSON text."""

    def get(self, keys: Sequence[CacheKey]) -> dict[CacheKey, str]:
        raise NotImplementedError

    def set(self, entries: Mapping[CacheKey, tuple[str, float | None]]) -> None:
        """Store each ``key: (value, ttl seconds or None)``."""
        raise NotImplementedError

    def clear(self, namespaces: Iterable[Namespace] | None = None) -> None:
        """Drop the entries of ``namespaces`` (None: every entry)."""
        raise NotImplementedError

    async def aget(self, keys: Sequence[CacheKey]) -> dict[CacheKey, str]:
        return self.get(keys)

    async def aset(self, entries: Mapping[CacheKey, tuple[str, float | None]]) -> None:
        self.set(entries)

    async def aclear(self, namespaces: Iterable[Namespace] | None = None) -> None:
        self.clear(namespaces)


def expiry(ttl: float | None) -> float | None:
    return None if ttl is None else time.time() + ttl


def expired(at: float | None) -> bool:
    return at is not None and at <= time.time()


__all__ = ["BaseCache", "CacheKey", "CachePolicy", "Namespace", "default_cache_key"]

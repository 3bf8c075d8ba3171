"""The store interface in LangGraph's shape: items under a namespace (a tuple of
strings) and a key, each a JSON-like dict, with sync and async methods alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from oncegraph.errors import ConfigError

Namespace = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Item:
    """One stored value: ``value`` under ``namespace`` and ``key``."""

    value: dict[str, Any]
    key: str
    namespace: Namespace
    created_at: datetime
    updated_at: datetime

    def dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "key": self.key,
            "namespace": list(self.namespace),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class SearchItem(Item):
    """An item a search found (``score`` is ``None``: no semantic index here)."""

    score: float | None = field(default=None)


def check_namespace(namespace: Any) -> Namespace:
    if not isinstance(namespace, tuple) or not all(
        isinstance(part, str) and part and "." not in part for part in namespace
    ):
        raise ConfigError(
            f"a store namespace is a tuple of non-empty strings without '.'; got {namespace!r}"
        )
    return namespace


class BaseStore:
    """What a node's ``store`` is. Subclasses implement the sync methods; the async
    ones call them (an in-process store does no I/O)."""

    def get(self, namespace: Namespace, key: str) -> Item | None:
        raise NotImplementedError

    def put(self, namespace: Namespace, key: str, value: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def delete(self, namespace: Namespace, key: str) -> None:
        self.put(namespace, key, None)

    def search(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        raise NotImplementedError

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        raise NotImplementedError

    async def aget(self, namespace: Namespace, key: str) -> Item | None:
        return self.get(namespace, key)

    async def aput(self, namespace: Namespace, key: str, value: dict[str, Any] | None) -> None:
        self.put(namespace, key, value)

    async def adelete(self, namespace: Namespace, key: str) -> None:
        self.delete(namespace, key)

    async def asearch(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        return self.search(namespace_prefix, query=query, filter=filter, limit=limit, offset=offset)

    async def alist_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        return self.list_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(value.get(k) == v for k, v in filter.items())


def namespaces_of(
    found: Iterable[Namespace],
    prefix: Namespace | None,
    suffix: Namespace | None,
    max_depth: int | None,
) -> list[Namespace]:
    out: set[Namespace] = set()
    for ns in found:
        if prefix and ns[: len(prefix)] != prefix:
            continue
        if suffix and ns[len(ns) - len(suffix) :] != suffix:
            continue
        out.add(ns[:max_depth] if max_depth is not None else ns)
    return sorted(out)


__all__ = ["BaseStore", "Item", "Namespace", "SearchItem", "check_namespace"]

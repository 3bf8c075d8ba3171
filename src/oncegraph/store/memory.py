"""``InMemoryStore``: a :class:`~oncegraph.store.base.BaseStore` in this process's
memory (safe to share between threads and runs; gone when the process ends)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.store.base import (
    BaseStore,
    Item,
    Namespace,
    check_namespace,
)


class InMemoryStore(BaseStore):
    """Items by namespace and key, kept in a dict behind a lock; values are copied in
    and out, so a caller that changes a value it got changes nothing stored."""

    def __init__(self, **_: Any) -> None:
        self._items: dict[Namespace, dict[str, Item]] = {}
        self._lock = threading.Lock()

    def get(self, namespace: Namespace, key: str) -> Item | None:
        with self._lock:
            item = self._items.get(check_namespace(namespace), {}).get(key)
        return None if item is None else _copy(item)

    def put(self, namespace: Namespace, key: str, value: dict[str, Any] | None) -> None:
        ns = check_namespace(namespace)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"a store value is a dict; got {type(value).__name__}")
        now = datetime.now(UTC)
        with self._lock:
            items = self._items.setdefault(ns, {})
            if value is None:
                items.pop(key, None)
                if not items:
                    del self._items[ns]
                return
            old = items.get(key)
            created = old.created_at if old is not None else now
            items[key] = Item(copy.deepcopy(dict(value)), key, ns, created, now)

    def _items_under(self, prefix: Namespace) -> list[Item]:
        with self._lock:
            return [
                item
                for ns, items in self._items.items()
                if ns[: len(prefix)] == prefix
                for item in items.values()
            ]

    def _namespaces(self) -> list[Namespace]:
        with self._lock:
            return list(self._items)


def _copy(item: Item) -> Item:
    return Item(
        copy.deepcopy(item.value), item.key, item.namespace, item.created_at, item.updated_at
    )


__all__ = ["InMemoryStore"]

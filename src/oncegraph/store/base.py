"""The store interface in LangGraph's shape: items under a namespace (a tuple of
strings) and a key, each a JSON-like dict, with sync and async methods alike."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from oncegraph.errors import ConfigError

Namespace = tuple[str, ...]
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


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


def async_twin(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The async method ``a<name>`` that calls the sync method ``<name>`` on its object:
    a subclass's override when it has one. Its signature is the sync one's."""
    name = method.__name__

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = getattr(self, name)(*args, **kwargs)
        return result

    functools.update_wrapper(twin, method)
    twin.__name__ = f"a{name}"
    twin.__qualname__ = f"{method.__qualname__[: -len(name)]}a{name}"
    return twin


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
        """The items under ``namespace_prefix`` whose value has every ``filter`` pair,
        the most recently updated first (``query`` is not used: no semantic index), each
        value a copy of its own. A store that lists its items (:meth:`_items_under`)
        needs nothing more; another overrides this."""
        found = [i for i in self._items_under(tuple(namespace_prefix)) if matches(i.value, filter)]
        found.sort(key=lambda i: i.updated_at, reverse=True)
        return [
            SearchItem(copy.deepcopy(i.value), i.key, i.namespace, i.created_at, i.updated_at, None)
            for i in found[offset : offset + limit]
        ]

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """The namespaces (:meth:`_namespaces`) under ``prefix`` and ending in ``suffix``,
        cut at ``max_depth``, sorted; a store that cannot list them overrides this."""
        return namespaces_of(self._namespaces(), prefix, suffix, max_depth)[offset : offset + limit]

    def _items_under(self, prefix: Namespace) -> list[Item]:
        """Every item whose namespace starts with ``prefix`` (for :meth:`search`)."""
        raise NotImplementedError

    def _namespaces(self) -> list[Namespace]:
        """Every namespace that holds an item (for :meth:`list_namespaces`)."""
        raise NotImplementedError

    # The async twins call the sync methods (a subclass's own, looked up by name).
    aget = async_twin(get)
    aput = async_twin(put)
    adelete = async_twin(delete)
    asearch = async_twin(search)
    alist_namespaces = async_twin(list_namespaces)


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

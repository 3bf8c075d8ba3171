"""``compile(store=InMemoryStore())``: the key-value store a node gets as its ``store``
parameter or ``runtime.store``, shared across threads and with subgraphs."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from oncegraph import START, StateGraph
from oncegraph.checkpoint.memory import InMemoryCheckpointer
from oncegraph.errors import ConfigError
from oncegraph.runtime import Runtime
from oncegraph.store import BaseStore
from oncegraph.store.memory import InMemoryStore


class S(TypedDict, total=False):
    user: str
    seen: int


def test_the_store_api() -> None:
    store = InMemoryStore()
    store.put(("users", "a"), "prefs", {"lang": "fr"})
    store.put(("users", "b"), "prefs", {"lang": "de"})
    got = store.get(("users", "a"), "prefs")
    assert got is not None and got.value == {"lang": "fr"} and got.namespace == ("users", "a")
    got.value["lang"] = "xx"  # a copy: nothing stored changes
    assert store.get(("users", "a"), "prefs").value == {"lang": "fr"}  # type: ignore[union-attr]
    assert {i.namespace for i in store.search(("users",))} == {("users", "a"), ("users", "b")}
    assert [i.value for i in store.search(("users",), filter={"lang": "de"})] == [{"lang": "de"}]
    assert store.list_namespaces(prefix=("users",), max_depth=1) == [("users",)]
    store.delete(("users", "a"), "prefs")
    assert store.get(("users", "a"), "prefs") is None
    with pytest.raises(ConfigError, match="namespace"):
        store.put("users", "k", {})  # type: ignore[arg-type]


def _app(store: BaseStore) -> Any:
    def count(state: S, store: BaseStore) -> dict[str, Any]:
        ns = ("visits", state["user"])
        got = store.get(ns, "n")
        n = (got.value["n"] if got else 0) + 1
        store.put(ns, "n", {"n": n})
        return {"seen": n}

    def read(state: S, runtime: Runtime) -> dict[str, Any]:
        assert runtime.store is store
        return {}

    inner = StateGraph(S)
    inner.add_node("count", count)
    inner.add_edge(START, "count")
    g = StateGraph(S)
    g.add_node("sub", inner.compile())  # a subgraph shares its parent's store
    g.add_node("read", read)
    g.add_edge(START, "sub")
    g.add_edge("sub", "read")
    return g.compile(checkpointer=InMemoryCheckpointer(), store=store)


async def test_nodes_share_the_store_across_threads_and_paths() -> None:
    store = InMemoryStore()
    app = _app(store)
    assert app.invoke({"user": "ada"}, {"thread_id": "t1"})["seen"] == 1
    assert (await app.ainvoke({"user": "ada"}, {"thread_id": "t2"}))["seen"] == 2
    chunks = [c async for c in app.astream({"user": "bob"}, {"thread_id": "t3"})]
    assert [next(iter(c)) for c in chunks] == ["sub", "read"]
    assert (await store.aget(("visits", "bob"), "n")).value == {"n": 1}  # type: ignore[union-attr]


def test_without_a_store_the_parameter_is_none() -> None:
    def node(state: S, store: BaseStore) -> dict[str, Any]:
        return {"seen": 0 if store is None else 1}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    assert g.compile().invoke({"user": "x"})["seen"] == 0

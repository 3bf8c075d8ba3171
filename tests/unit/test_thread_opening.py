"""Starting a run reads the thread row and its latest run in one request where the store
can (``ThreadOpening``), and separately where it cannot: the same answers either way."""

from __future__ import annotations

from typing import Any

import pytest

from oncegraph.errors import ForeignRunError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.memory import InMemoryCheckpointer
from oncegraph.storage.protocols import ThreadOpening


class Counting(InMemoryCheckpointer):
    """A memory store that counts its thread and run reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self._inside = False  # the memory store's open_thread calls the other two

    async def open_thread(self, thread_id: str) -> Any:
        self.reads.append("open_thread")
        self._inside = True
        try:
            return await super().open_thread(thread_id)
        finally:
            self._inside = False

    async def get_thread(self, thread_id: str) -> Any:
        if not self._inside:
            self.reads.append("get_thread")
        return await super().get_thread(thread_id)

    async def list_runs(self, **kwargs: Any) -> Any:
        if not self._inside:
            self.reads.append("list_runs")
        return await super().list_runs(**kwargs)


class Separate(Counting):
    """A store without ``open_thread`` (a third-party store written before it existed)."""

    open_thread = None  # type: ignore[assignment]


def _app(store: InMemoryCheckpointer, name: str = "hr") -> Any:
    model = ScriptedModel.turns("hello", "again")
    return ReactAgent(model=model, tools=[], name=name).compile(checkpointer=store)


def _said(out: dict[str, Any]) -> str:
    return str(out["messages"][-1]["content"])


@pytest.mark.parametrize("store_class", [Counting, Separate], ids=["one-read", "two-reads"])
async def test_a_new_run_and_the_next_turn_read_the_thread_the_same_way(
    store_class: type[Counting],
) -> None:
    store = store_class()
    assert isinstance(store, ThreadOpening) == (store_class is Counting)
    app = _app(store)
    config = {"thread_id": "t1"}
    first = await app.ainvoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    assert _said(first) == "hello"
    start_reads = list(store.reads)
    if store_class is Counting:  # the start's reads: one request, nothing read twice
        assert start_reads == ["open_thread"]
    else:
        assert start_reads == ["list_runs", "get_thread"]
    second = await app.ainvoke({"messages": [{"role": "user", "content": "more"}]}, config)
    assert _said(second) == "again" and len(second["messages"]) == 4
    runs = await store.list_runs(thread_id="t1")
    assert [r.status.value for r in runs] == ["completed", "completed"]


@pytest.mark.parametrize("store_class", [Counting, Separate], ids=["one-read", "two-reads"])
async def test_a_thread_of_another_app_is_refused_either_way(store_class: type[Counting]) -> None:
    store = store_class()
    await _app(store, "hr").ainvoke(
        {"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t1"}
    )
    with pytest.raises(ForeignRunError, match="belongs to app 'hr'"):
        await _app(store, "support").ainvoke(
            {"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t1"}
        )

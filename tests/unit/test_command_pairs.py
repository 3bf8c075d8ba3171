"""``Command(update=[(field, value), ...])``: a node writes a field more than once in one
step, each write reduced in order; the ``updates`` stream shows each write, the task
views show the field's writes as ``{"$writes": [...]}``."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from oncegraph import END, START, Command, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer


def _joined(a: str, b: str) -> str:
    return " | ".join(x for x in (a, b) if x)


class Notes(TypedDict):
    text: Annotated[str, _joined]
    other: str


def _app(update: Any) -> Any:
    g = StateGraph(Notes)
    g.add_node("write", lambda s: Command(update=update))
    g.add_edge(START, "write")
    g.add_edge("write", END)
    return g.compile(checkpointer=InMemoryCheckpointer())


def test_a_field_written_twice_is_reduced_write_by_write() -> None:
    app = _app([("text", "a"), ("text", "b"), ("other", "x")])
    config = {"configurable": {"thread_id": "t"}}
    chunks = list(app.stream({"text": "start"}, config, stream_mode=["updates", "debug"]))
    updates = [c for mode, c in chunks if mode == "updates"]
    assert updates == [{"write": [{"text": "a"}, {"text": "b"}, {"other": "x"}]}]
    results = [
        c["payload"]["result"]
        for mode, c in chunks
        if mode == "debug" and c["type"] == "task_result"
    ]
    assert results == [{"text": {"$writes": ["a", "b"]}, "other": "x"}]
    assert app.get_state(config).values == {"text": "start | a | b", "other": "x"}


def test_pairs_without_a_repeated_field_are_one_update() -> None:
    app = _app([("text", "a"), ("other", "x")])
    config = {"configurable": {"thread_id": "t"}}
    updates = list(app.stream({"text": ""}, config, stream_mode="updates"))
    assert updates == [{"write": {"text": "a", "other": "x"}}]
    assert app.get_state(config).values == {"text": "a", "other": "x"}

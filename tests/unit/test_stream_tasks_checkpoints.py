"""The ``tasks`` and ``checkpoints`` stream modes: each task as it starts and ends, and
each checkpoint as the history shows it."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph.errors import ConfigError
from oncegraph.graph import START, StateGraph
from oncegraph.storage.protocols import Checkpointer


class State(TypedDict):
    foo: Annotated[list[str], operator.add]


def _app(checkpointer: Checkpointer) -> Any:
    def one(state: State) -> dict[str, Any]:
        return {"foo": ["one"]}

    def two(state: State) -> dict[str, Any]:
        return {"foo": ["two"]}

    return (
        StateGraph(State)
        .add_node("one", one)
        .add_node("two", two)
        .add_edge(START, "one")
        .add_edge("one", "two")
        .compile(checkpointer=checkpointer)
    )


def test_tasks_mode_gives_each_task_as_it_starts_and_ends(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    config = {"configurable": {"thread_id": "t"}}
    chunks = list(app.stream({"foo": ["in"]}, config, stream_mode="tasks"))
    assert [(c["name"], "input" in c) for c in chunks] == [
        ("one", True),
        ("one", False),
        ("two", True),
        ("two", False),
    ]
    start, end = chunks[0], chunks[1]
    assert start["id"] == end["id"] and start["input"] == {"foo": ["in"]}
    assert end["result"] == {"foo": ["one"]} and end["error"] is None and end["interrupts"] == []
    assert chunks[2]["input"] == {"foo": ["in", "one"]}
    # the ids are those of the history's tasks
    history = list(app.get_state_history(config))
    ids = {t.id for s in history for t in s.tasks}
    assert {c["id"] for c in chunks} <= ids


def test_checkpoints_mode_gives_the_history_as_it_is_written(
    checkpointer: Checkpointer,
) -> None:
    app = _app(checkpointer)
    config = {"configurable": {"thread_id": "t"}}
    items = list(app.stream({"foo": ["in"]}, config, stream_mode=["updates", "checkpoints"]))
    assert [m for m, _ in items] == [
        "checkpoints",
        "checkpoints",
        "updates",
        "checkpoints",
        "updates",
        "checkpoints",
    ]
    streamed = [c for m, c in items if m == "checkpoints"]
    history = list(app.get_state_history(config))[::-1]
    assert [c["config"] for c in streamed] == [s.config for s in history]
    assert [c["values"] for c in streamed] == [s.values for s in history]
    assert [tuple(c["next"]) for c in streamed] == [s.next for s in history]


def test_debug_alongside_tasks_is_still_its_own_mode(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    items = list(
        app.stream({"foo": ["in"]}, {"configurable": {"thread_id": "t"}}, stream_mode=["tasks"])
    )
    assert {m for m, _ in items} == {"tasks"}  # no debug events leak out
    both = list(
        app.stream(
            {"foo": ["in"]}, {"configurable": {"thread_id": "u"}}, stream_mode=["tasks", "debug"]
        )
    )
    tasks = [c for m, c in both if m == "tasks"]
    debug = [c["payload"] for m, c in both if m == "debug" and c["type"] != "checkpoint"]
    assert tasks == debug


def test_an_unknown_mode_still_names_the_known_ones() -> None:
    from oncegraph.storage.memory import InMemoryCheckpointer

    app = _app(InMemoryCheckpointer())
    with pytest.raises(ConfigError, match=r"'checkpoints'.*'tasks'"):
        list(app.stream({"foo": []}, {"configurable": {"thread_id": "t"}}, stream_mode="tokens"))

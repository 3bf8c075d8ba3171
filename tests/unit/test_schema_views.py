"""What a run takes as input and what a router reads, by their schemas (as LangGraph):
input keys outside the input schema (or, without one, outside the state schema's own
fields) are dropped, each with one warning; a router annotated with its own TypedDict
reads only its fields; an async router also routes an ``update_state`` written as its
node."""

from __future__ import annotations

import logging
import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.storage.protocols import Checkpointer


class State(TypedDict):
    hello: str
    seen: Annotated[list[Any], operator.add]


class ForB(TypedDict):
    hello: str
    now: int


def test_a_field_only_a_node_schema_adds_is_not_input() -> None:
    def a(state: State) -> dict[str, Any]:
        return {"seen": [sorted(state)]}

    def b(state: ForB) -> dict[str, Any]:
        return {"seen": [dict(state)]}

    builder = StateGraph(State)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    out = builder.compile().invoke({"hello": "x", "seen": [], "now": 345})
    assert out["seen"] == [["hello", "seen"], {"hello": "x"}]  # 'now' was not taken


def test_keys_outside_an_input_schema_are_dropped() -> None:
    class In(TypedDict):
        hello: str

    builder = StateGraph(State, input_schema=In)
    builder.add_node("a", lambda s: {"seen": [s.get("seen", [])]})
    builder.add_edge(START, "a")
    out = builder.compile().invoke({"hello": "x", "seen": ["smuggled"]})
    assert out["seen"] == [[]]


class Overall(TypedDict):
    foo: Annotated[int, operator.add]
    bar: str


class RouterState(TypedDict):  # module level: the annotations resolve
    baz: str


class Node2State(TypedDict):
    foo: Annotated[int, operator.add]
    baz: str


def test_a_router_reads_its_own_input_schema() -> None:
    read: list[Any] = []

    def router(state: RouterState) -> str:
        read.append(dict(state))
        return "node_2" if state["baz"] == "meow" else END

    def node_2(state: Node2State) -> dict[str, Any]:
        return {"foo": 1, "bar": state["baz"]}

    builder = StateGraph(Overall)
    builder.add_node("node_1", lambda s: {"foo": 1, "baz": "meow"})
    builder.add_node("node_2", node_2)
    builder.add_edge(START, "node_1")
    builder.add_conditional_edges("node_1", router)
    assert builder.compile().invoke({"foo": 0}) == {"foo": 2, "bar": "meow"}
    assert read == [{"baz": "meow"}]


def test_update_state_as_a_node_with_an_async_router(checkpointer: Checkpointer) -> None:
    async def decide(state: State) -> str:
        return "right" if state["hello"] == "go right" else "left"

    builder = StateGraph(State)
    builder.add_node("first", lambda s: {"seen": ["first"]})
    builder.add_node("left", lambda s: {"seen": ["left"]})
    builder.add_node("right", lambda s: {"seen": ["right"]})
    builder.add_edge(START, "first")
    builder.add_conditional_edges("first", decide, ["left", "right"])
    app = builder.compile(checkpointer=checkpointer)
    config = {"thread_id": "route-1"}
    assert app.invoke({"hello": "go left", "seen": []}, config)["seen"] == ["first", "left"]
    app.update_state(config, {"hello": "go right"}, as_node="first")
    assert app.get_state(config).next == ("right",)  # routed by the awaited router
    assert app.invoke(None, config)["seen"] == ["first", "left", "right"]


def test_an_input_key_the_state_lacks_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def b(state: ForB) -> dict[str, Any]:
        return {"seen": [dict(state)]}

    builder = StateGraph(State)
    builder.add_node("b", b)
    builder.add_edge(START, "b")
    with caplog.at_level(logging.WARNING, logger="oncegraph.state.channels"):
        out = builder.compile().invoke({"hello": "x", "typo": 1})
    assert out == {"hello": "x", "seen": [{"hello": "x"}]}
    assert [r.getMessage() for r in caplog.records if "'typo'" in r.getMessage()] == [
        "input key 'typo' is not a field of the graph's input schema, so it is dropped (as "
        "LangGraph drops it); known fields: ['hello', 'seen']. Add 'typo' to the input "
        "schema (or the state schema) or fix the input."
    ]

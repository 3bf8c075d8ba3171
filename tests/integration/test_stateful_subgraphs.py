"""Stateful subgraphs: ``compile(checkpointer=True)``.

Such a graph has no store of its own: run inside a parent's task (as a node, or called
with ``invoke`` / ``ainvoke`` / ``stream`` inside a node) it keeps its checkpoints on a
thread of the parent's thread that every call shares, so its state carries over from
one call to the next (reducers apply to the new input), per node: two nodes keep two
states, two parent threads two states. A call interrupted or crashed is resumed from
its own head (not started again), so its effects are not repeated; namespaces are the
node's name, as LangGraph names them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import START, Command, FaultPlan, StateGraph, effect, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import _CrashSignal
from oncegraph.storage.protocols import Checkpointer

RunPath = Callable[..., dict[str, Any]]


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


class Parent(TypedDict, total=False):
    topic: str
    seen: list[str]


def _memory(sent: list[str] | None = None, ask: bool = False) -> CompiledGraph:
    """A subgraph that appends a note per call (with an effect when ``sent`` is given)."""

    def charge(topic: str) -> str:
        assert sent is not None
        sent.append(topic)
        return f"charged {topic}"

    def note(state: Notes) -> dict[str, Any]:
        last = state["notes"][-1]
        answer = interrupt(f"note {last}?") if ask else "ok"
        text = effect(charge, last) if sent is not None else f"noted {last}"
        return {"notes": [f"{text} ({answer})"]}

    b = StateGraph(Notes)
    b.add_node("note", note)
    b.add_edge(START, "note")
    return b.compile(checkpointer=True)


def _parent(
    checkpointer: Checkpointer, inner: CompiledGraph, kind: str = "sync", nodes: int = 1
) -> CompiledGraph:
    def call_sync(state: Parent) -> dict[str, Any]:
        return {"seen": inner.invoke({"notes": [state["topic"]]})["notes"]}

    async def call_async(state: Parent) -> dict[str, Any]:
        return {"seen": (await inner.ainvoke({"notes": [state["topic"]]}))["notes"]}

    b = StateGraph(Parent)
    names = [f"call{i}" for i in range(nodes)]
    for name in names:
        b.add_node(name, call_sync if kind == "sync" else call_async)
    b.add_edge(START, names[0])
    for a, z in itertools.pairwise(names):
        b.add_edge(a, z)
    return b.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_subgraph_keeps_its_state_across_calls(
    checkpointer: Checkpointer, run_path: RunPath, kind: str
) -> None:
    app = _parent(checkpointer, _memory(), kind)
    cfg = {"thread_id": "t"}
    assert run_path(app, {"topic": "apples"}, cfg)["seen"] == ["apples", "noted apples (ok)"]
    assert run_path(app, {"topic": "pears"}, cfg)["seen"] == [
        "apples",
        "noted apples (ok)",
        "pears",
        "noted pears (ok)",
    ]
    # another parent thread: a state of its own
    assert run_path(app, {"topic": "figs"}, {"thread_id": "u"})["seen"] == [
        "figs",
        "noted figs (ok)",
    ]


def test_each_node_keeps_a_state_of_its_own(checkpointer: Checkpointer) -> None:
    app = _parent(checkpointer, _memory(), nodes=2)
    out = app.invoke({"topic": "apples"}, {"thread_id": "t"})
    # call1 ran the same graph as call0, but on its own thread: only its own note
    assert out["seen"] == ["apples", "noted apples (ok)"]


def test_a_subgraph_node_keeps_its_state_and_streams_under_the_nodes_name(
    checkpointer: Checkpointer,
) -> None:
    class Topic(TypedDict, total=False):
        topic: str
        notes: list[str]  # the child's output, no reducer here

    b = StateGraph(Topic)
    b.add_node("prepare", lambda s: {"notes": [s["topic"]]})
    b.add_node("inner", _memory())
    b.add_edge(START, "prepare")
    b.add_edge("prepare", "inner")
    app = b.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    chunks = list(app.stream({"topic": "a"}, cfg, subgraphs=True, stream_mode="updates"))
    assert (("inner",), {"note": {"notes": ["noted a (ok)"]}}) in chunks
    out = app.invoke({"topic": "b"}, cfg)
    # the child's state carried the first call's notes; the new input went on top
    assert out["notes"] == ["a", "noted a (ok)", "b", "noted b (ok)"]


def test_an_interrupted_call_resumes_from_its_own_head(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []
    app = _parent(checkpointer, _memory(sent, ask=True))
    cfg = {"thread_id": "t"}
    out = run_path(app, {"topic": "apples"}, cfg)
    assert out["__interrupt__"][0].value == "note apples?"
    out = run_path(app, Command(resume="yes"), cfg)
    assert out["seen"] == ["apples", "charged apples (yes)"]
    run_path(app, {"topic": "pears"}, cfg)
    out = run_path(app, Command(resume="sure"), cfg)
    assert out["seen"] == ["apples", "charged apples (yes)", "pears", "charged pears (sure)"]
    assert sent == ["apples", "pears"]


def test_a_crash_after_the_subgraphs_effect_does_not_call_again_or_add_the_input_twice(
    checkpointer: Checkpointer,
) -> None:
    sent: list[str] = []
    app = _parent(checkpointer, _memory(sent))
    cfg = {"thread_id": "t"}
    app.invoke({"topic": "apples"}, cfg)
    # the second call: the subgraph's step commits (the 1st hit), then the parent's
    # step crashes before it is written (the 2nd)
    with pytest.raises(_CrashSignal):
        app.invoke({"topic": "pears"}, {**cfg, "fault_plan": FaultPlan("before_checkpoint", 2)})
    out = app.invoke(None, cfg)
    # the resumed call found its own head: the input was not added again, no new charge
    assert out["seen"] == ["apples", "charged apples (ok)", "pears", "charged pears (ok)"]
    assert sent == ["apples", "pears"]


def test_get_state_with_subgraphs_shows_the_waiting_subgraph_under_its_name(
    checkpointer: Checkpointer,
) -> None:
    b = StateGraph(Notes)
    b.add_node("inner", _memory(ask=True))
    b.add_edge(START, "inner")
    app = b.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    app.invoke({"notes": ["a"]}, cfg)
    state = app.get_state(cfg, subgraphs=True)
    child = state.tasks[0].state
    assert child.next == ("note",) and child.values == {"notes": ["a"]}
    assert child.config["configurable"]["checkpoint_ns"] == "inner"
    assert app.get_state(cfg).tasks[0].state == {
        "configurable": {"thread_id": "t", "checkpoint_ns": "inner"}
    }


def test_a_branch_sees_the_subgraphs_state_as_it_was_at_the_branch_point(
    checkpointer: Checkpointer,
) -> None:
    class Results(TypedDict, total=False):
        results: Annotated[list[str], operator.add]

    seen: list[list[str]] = []

    def note(state: Notes) -> dict[str, Any]:
        seen.append(list(state["notes"]))
        return {"notes": [f"call {len(state['notes']) + 1}"]}

    inner = StateGraph(Notes)
    inner.add_node("note", note)
    inner.add_edge(START, "note")
    b = StateGraph(Results)
    b.add_node("prepare", lambda s: {"results": ["p"]})
    b.add_node("sub", inner.compile(checkpointer=True))
    b.add_edge(START, "prepare")
    b.add_edge("prepare", "sub")
    app = b.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    app.invoke({"results": []}, cfg)
    app.invoke({"results": []}, cfg)
    assert seen == [[], ["call 1"]]
    # branch from the second call's checkpoint before "sub": the subgraph had one note then
    before_second = next(s for s in app.get_state_history(cfg) if s.next == ("sub",))
    fork = app.update_state(before_second.config, {"results": ["forked"]})
    app.invoke(None, fork)
    assert seen[-1] == ["call 1"]
    # the original thread's subgraph goes on from its own latest state
    app.invoke({"results": []}, cfg)
    assert seen[-1] == ["call 1", "call 2"]

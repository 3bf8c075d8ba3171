"""Stream details shared with LangGraph: a subgraph's checkpoints in the ``debug`` stream
are the ones its history (``checkpoint_ns``) lists; a task's ``task_result`` follows its
update; a ``messages`` chunk's metadata names the task's own namespace."""

from __future__ import annotations

import operator
from collections import defaultdict
from typing import Annotated, Any, TypedDict

from langchain_core.messages import HumanMessage

from oncegraph.graph import START, MessagesState, StateGraph
from oncegraph.storage.protocols import Checkpointer


class Trail(TypedDict):
    seen: Annotated[list[str], operator.add]


def _mark(name: str) -> Any:
    def node(state: Trail) -> dict[str, Any]:
        return {"seen": [name]}

    return node


def _nested(checkpointer: Checkpointer) -> Any:
    inner = StateGraph(Trail).add_node("i1", _mark("i1")).add_node("i2", _mark("i2"))
    inner.add_edge(START, "i1").add_edge("i1", "i2")
    mid = StateGraph(Trail).add_node("m1", _mark("m1")).add_node("inner", inner.compile())
    mid.add_edge(START, "m1").add_edge("m1", "inner")
    top = StateGraph(Trail).add_node("t1", _mark("t1")).add_node("mid", mid.compile())
    top.add_edge(START, "t1").add_edge("t1", "mid")
    return top.compile(checkpointer=checkpointer)


def _ids(config: dict[str, Any] | None) -> tuple[str, str, str] | None:
    if config is None:
        return None
    c = config["configurable"]
    return c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"]


def test_a_subgraphs_debug_checkpoints_are_its_history(checkpointer: Checkpointer) -> None:
    app = _nested(checkpointer)
    config = {"configurable": {"thread_id": "n"}}
    by_ns: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for ns, event in app.stream({"seen": []}, config, stream_mode="debug", subgraphs=True):
        if event["type"] == "checkpoint":
            by_ns[ns].append(event["payload"])
    assert len(by_ns) == 3  # the graph, mid, and inner inside mid
    for ns, streamed in by_ns.items():
        wanted = {"configurable": {"thread_id": "n", "checkpoint_ns": "|".join(ns)}}
        history = list(app.get_state_history(wanted))[::-1]
        assert len(history) == len(streamed) == 4  # input, then a checkpoint per step
        for shown, snap in zip(streamed, history, strict=True):
            assert _ids(shown["config"]) == _ids(snap.config)
            assert _ids(shown["parent_config"]) == _ids(snap.parent_config)
            assert shown["values"] == snap.values
            assert shown["next"] == list(snap.next)
            assert [t["id"] for t in shown["tasks"]] == [t.id for t in snap.tasks]
    deepest = max(by_ns, key=len)
    wanted = {"configurable": {"thread_id": "n", "checkpoint_ns": "|".join(deepest)}}
    assert next(iter(app.get_state_history(wanted))).values["seen"][-2:] == ["i1", "i2"]


def test_a_task_result_follows_its_update(checkpointer: Checkpointer) -> None:
    g = StateGraph(Trail).add_node("a", _mark("a")).add_node("b", _mark("b"))
    g.add_node("c", _mark("c")).add_edge(START, "a").add_edge("a", "b").add_edge("a", "c")
    app = g.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "o"}}
    shown = []
    for mode, chunk in app.stream({"seen": []}, config, stream_mode=["updates", "debug"]):
        if mode == "updates":
            shown.append(("update", next(iter(chunk))))
        elif chunk["type"] == "task_result":
            shown.append(("result", chunk["payload"]["name"]))
    assert shown[:2] == [("update", "a"), ("result", "a")]
    assert sorted(shown[2:]) == [("result", "b"), ("result", "c"), ("update", "b"), ("update", "c")]
    for i in (2, 4):  # each of the parallel pair: its update, then its result
        assert shown[i][0] == "update" and shown[i + 1] == ("result", shown[i][1])


def test_messages_metadata_names_the_task() -> None:
    def say(state: MessagesState) -> dict[str, Any]:
        return {"messages": [HumanMessage("hello")]}

    app = StateGraph(MessagesState).add_node("say", say).add_edge(START, "say").compile()
    ((message, meta),) = list(app.stream({"messages": []}, stream_mode="messages"))
    assert message.content == "hello"
    assert meta["langgraph_node"] == "say" and meta["langgraph_step"] == 1
    assert meta["langgraph_checkpoint_ns"].startswith("say:")
    assert meta["ls_integration"] == "langgraph"  # written by the node, not a model's
    assert "thread_id" not in meta  # no thread was named


def test_messages_metadata_has_the_thread_named(checkpointer: Checkpointer) -> None:
    def say(state: MessagesState) -> dict[str, Any]:
        return {"messages": [HumanMessage("hello")]}

    g = StateGraph(MessagesState).add_node("say", say).add_edge(START, "say")
    app = g.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "m"}}
    ((_, meta),) = list(app.stream({"messages": []}, config, stream_mode="messages"))
    assert meta["thread_id"] == "m"

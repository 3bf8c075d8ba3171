"""``add_messages`` as LangGraph's: removals (duplicates, ``REMOVE_ALL_MESSAGES``),
LangChain ids, ``format="langchain-openai"`` and ``push_message`` in a graph."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage

from oncegraph import END, START, StateGraph
from oncegraph.checkpoint.memory import InMemoryCheckpointer
from oncegraph.errors import InvalidUpdateError
from oncegraph.graph.message import REMOVE_ALL_MESSAGES, add_messages, push_message


def test_a_removal_named_twice_removes_once() -> None:
    left = [HumanMessage("a", id="1"), AIMessage("b", id="2")]
    assert add_messages(left, [RemoveMessage(id="2"), RemoveMessage(id="2")]) == left[:1]
    with pytest.raises(InvalidUpdateError, match="doesn't exist"):
        add_messages(left, RemoveMessage(id="3"))


def test_remove_all_keeps_only_what_follows_it() -> None:
    left = [HumanMessage("a"), AIMessage("b")]
    right = [HumanMessage("x"), RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("y")]
    out = add_messages(left, right)
    assert [m.content for m in out] == ["y"]
    dicts = add_messages(
        [{"role": "user", "content": "a"}], [{"role": "remove", "id": REMOVE_ALL_MESSAGES}]
    )
    assert dicts == []


def test_langchain_messages_get_uuid_ids_and_single_messages_are_lists() -> None:
    out = add_messages(HumanMessage("a"), AIMessage("b"))
    assert [type(m) for m in out] == [HumanMessage, AIMessage]
    assert all(uuid.UUID(m.id).version == 4 for m in out)


class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _remove_all_app() -> Any:
    def wipe(state: S) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), AIMessage("fresh", id="f")]}

    g = StateGraph(S)
    g.add_node("wipe", wipe)
    g.add_edge(START, "wipe")
    g.add_edge("wipe", END)
    return g.compile(checkpointer=InMemoryCheckpointer())


def test_remove_all_in_a_graph_holds_when_the_state_is_read_back() -> None:
    app = _remove_all_app()
    cfg = {"configurable": {"thread_id": "t"}}
    out = app.invoke({"messages": [("user", "a"), ("user", "b")]}, cfg)
    assert [m.content for m in out["messages"]] == ["fresh"]
    assert [m.content for m in app.get_state(cfg).values["messages"]] == ["fresh"]


def test_openai_format_rewrites_content_blocks() -> None:
    class F(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages(format="langchain-openai")]

    def node(state: F) -> dict[str, Any]:
        block = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "AA"},
        }
        return {"messages": [HumanMessage(content=[block])]}

    g = StateGraph(F)
    g.add_node("n", node)
    g.add_edge(START, "n")
    out = g.compile().invoke({"messages": [("user", "hi")]})
    assert out["messages"][1].content == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
    ]
    with pytest.raises(ValueError, match="not a known format"):
        add_messages(format="nope")


@pytest.mark.parametrize("path", ["stream", "astream"])
async def test_pushed_messages_stream_once_and_are_stored(path: str) -> None:
    def chat(state: S) -> dict[str, Any]:
        with pytest.raises(InvalidUpdateError, match="Message ID is required"):
            push_message(AIMessage("no id"))
        push_message(AIMessage("one", id="1"))
        return {"messages": [AIMessage("two", id="2")]}

    g = StateGraph(S)
    g.add_node("chat", chat)
    g.add_edge(START, "chat")
    app = g.compile()
    modes = ["messages", "values"]
    if path == "stream":
        chunks = list(app.stream({"messages": []}, stream_mode=modes))
    else:
        chunks = [c async for c in app.astream({"messages": []}, stream_mode=modes)]
    streamed = [c[1][0].id for c in chunks if c[0] == "messages"]
    values = [c[1] for c in chunks if c[0] == "values"][-1]
    assert [m.id for m in values["messages"]] == ["1", "2"]
    assert streamed[0] == "1" and streamed.count("1") == 1


def test_messages_mode_does_not_stream_again_what_the_state_had() -> None:
    def first(state: S) -> dict[str, Any]:
        return {"messages": [AIMessage("hi", id="a1")]}

    def echo(state: S) -> dict[str, Any]:  # returns the state it read, plus one new
        return {"messages": [*state["messages"], AIMessage("new", id="a2")]}

    g = StateGraph(S)
    g.add_node("first", first)
    g.add_node("echo", echo)
    g.add_edge(START, "first")
    g.add_edge("first", "echo")
    chunks = list(g.compile().stream({"messages": [("user", "q")]}, stream_mode="messages"))
    assert [(m.id, meta["langgraph_node"]) for m, meta in chunks] == [
        ("a1", "first"),
        ("a2", "echo"),
    ]


def test_a_dict_message_equals_the_langchain_message_it_reads_like() -> None:
    from oncegraph.messages import MessageDict

    mine = MessageDict(role="user", content="hi", id="1")
    assert mine == HumanMessage("hi", id="1") and [mine] == [HumanMessage("hi", id="1")]
    assert mine != HumanMessage("hi", id="2") and mine != AIMessage("hi", id="1")
    assert mine == {"role": "user", "content": "hi", "id": "1"}

"""Messages: our dicts read like LangChain messages; LangChain messages are accepted as
input and, for states declared with them, kept as objects (stored losslessly as JSON)."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import orjson
import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from oncegraph import END, START, MessagesState, StateGraph, add_messages, tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import InvalidUpdateError
from oncegraph.messages import Message, MessageDict
from oncegraph.prebuilt.agent import tools_condition
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.tools import ToolNode

# -- MessageDict ----------------------------------------------------------------------


def test_message_dict_is_a_dict_that_reads_like_a_langchain_message() -> None:
    call = {"id": "c1", "name": "lookup", "args": {"q": "x"}}
    msg = MessageDict(role="assistant", content="hi", id="m1", tool_calls=[call])
    assert isinstance(msg, dict)
    assert msg == {"role": "assistant", "content": "hi", "id": "m1", "tool_calls": [call]}
    assert msg["role"] == "assistant" and msg.get("content") == "hi"
    assert (msg.content, msg.id, msg.role, msg.type) == ("hi", "m1", "assistant", "ai")
    assert msg.tool_calls == [call] and msg.tool_calls[0]["name"] == "lookup"
    assert orjson.dumps(msg) == orjson.dumps(dict(msg))  # stored exactly like a dict
    user = MessageDict(role="user", content=[{"type": "text", "text": "a"}, "b"])
    assert (user.type, user.tool_calls, user.text, user.name) == ("human", [], "ab", None)
    tool = MessageDict(role="tool", content="r", tool_call_id="c1")
    assert (tool.type, tool.tool_call_id) == ("tool", "c1")
    with pytest.raises(AttributeError):
        msg.content = "x"  # type: ignore[misc]


def test_pretty_print_shows_role_content_and_tool_calls(capsys: pytest.CaptureFixture[str]) -> None:
    call = {"id": "c", "name": "f", "args": {}}
    MessageDict(role="assistant", content="hi", tool_calls=[call]).pretty_print()
    out = capsys.readouterr().out
    assert "Ai Message" in out and "hi" in out and "f (c)" in out


# -- add_messages, called directly --------------------------------------------------------


def test_add_messages_returns_message_dicts_with_ids_and_langgraph_role_names() -> None:
    out = add_messages([], ["hi", ("ai", "hello"), {"type": "human", "content": "again"}])
    assert all(type(m) is MessageDict and m.id for m in out)
    assert [m.role for m in out] == ["user", "assistant", "user"]
    assert [m.content for m in out] == ["hi", "hello", "again"]


def test_add_messages_with_langchain_messages_returns_langchain_messages() -> None:
    left = add_messages([], [{"role": "user", "content": "hi", "id": "1"}])
    out = add_messages(left, [AIMessage("yo", id="2")])
    assert [type(m) for m in out] == [HumanMessage, AIMessage]
    replaced = add_messages(out, [AIMessage("yo again", id="2")])
    assert [m.content for m in replaced] == ["hi", "yo again"]
    removed = add_messages(replaced, [RemoveMessage(id="1")])
    assert [m.id for m in removed] == ["2"]
    fresh = add_messages([], [HumanMessage("no id")])
    assert fresh[0].id


def test_removing_an_unknown_message_is_an_error() -> None:
    with pytest.raises(InvalidUpdateError, match="cannot remove message 'nope'"):
        add_messages([MessageDict(role="user", content="a", id="1")], [RemoveMessage(id="nope")])


# -- three kinds of message state ----------------------------------------------------------


class DictState(TypedDict):
    messages: Annotated[list[Message], add_messages]


class LangChainState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class BaseMessageState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


LC_INPUT: list[Any] = [
    SystemMessage("be brief", id="s"),
    HumanMessage("weather?", id="h"),
    AIMessage(
        "", id="a", tool_calls=[{"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}]
    ),
    ToolMessage("rain", tool_call_id="call_1", id="t"),
]


def _echo_app(state: Any, store: Checkpointer, reply: Any) -> CompiledGraph:
    def bot(s: Any) -> dict[str, Any]:
        return {"messages": [reply]}

    g = StateGraph(state)
    g.add_node("bot", bot)
    g.add_edge(START, "bot")
    g.add_edge("bot", END)
    return g.compile(checkpointer=store)


def _reread(state: Any, store: Checkpointer, cfg: dict[str, Any]) -> list[Any]:
    """The thread's messages as a fresh app reads them from the store (JSON inside)."""
    return list(_echo_app(state, store, "unused").get_state(cfg).values["messages"])


def test_langchain_input_to_a_dict_state_becomes_message_dicts() -> None:
    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}
    out = _echo_app(DictState, store, {"role": "assistant", "content": "done"}).invoke(
        {"messages": LC_INPUT}, cfg
    )
    assert all(type(m) is MessageDict for m in out["messages"])
    assert [(m.role, m.id) for m in out["messages"][:4]] == [
        ("system", "s"),
        ("user", "h"),
        ("assistant", "a"),
        ("tool", "t"),
    ]
    assert out["messages"][2].tool_calls == [
        {"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}
    ]
    assert out["messages"][3]["tool_call_id"] == "call_1"
    assert _reread(DictState, store, cfg) == out["messages"]


@pytest.mark.parametrize("state", [LangChainState, BaseMessageState])
def test_a_langchain_state_keeps_message_objects_across_storage(state: Any) -> None:
    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}
    app = _echo_app(state, store, {"role": "assistant", "content": "it rains", "id": "r"})
    out = app.invoke({"messages": [*LC_INPUT, ("user", "thanks")]}, cfg)
    kinds = [type(m) for m in out["messages"]]
    assert kinds == [SystemMessage, HumanMessage, AIMessage, ToolMessage, HumanMessage, AIMessage]
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content == "it rains"
    back = _reread(state, store, cfg)
    assert back == out["messages"]
    assert [type(m) for m in back] == kinds
    assert back[2].tool_calls[0]["args"] == {"city": "Oslo"}


def test_messages_state_is_all_langchain_once_a_langchain_message_is_in_it() -> None:
    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}
    app = _echo_app(MessagesState, store, AIMessage("sunny", id="r"))
    out = app.invoke({"messages": [("user", "weather?"), ("user", "and tomorrow?")]}, cfg)
    first, second, reply = out["messages"]
    assert isinstance(first, HumanMessage) and isinstance(reply, AIMessage)
    assert type(second) is HumanMessage and second.content == "and tomorrow?"
    assert first.id and second.id and first.id != second.id  # ids kept from the dicts
    back = _reread(MessagesState, store, cfg)
    assert back == out["messages"] and [type(m) for m in back] == [type(m) for m in out["messages"]]


def test_removals_are_replayed_when_the_log_is_read_back() -> None:
    class Extended(MessagesState):
        note: str

    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}

    def prune(state: Any) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id=m.id) for m in state["messages"][:-1]], "note": "x"}

    g = StateGraph(Extended)
    g.add_node("prune", prune)
    g.add_edge(START, "prune")
    app = g.compile(checkpointer=store)
    out = app.invoke(
        {"messages": [HumanMessage("a", id="1"), {"role": "user", "content": "b", "id": "2"}]}, cfg
    )
    assert [m.id for m in out["messages"]] == ["2"]
    assert [m.id for m in _reread(Extended, store, cfg)] == ["2"]


def test_dict_removal_in_a_dict_state() -> None:
    store = InMemoryCheckpointer()
    app = _echo_app(DictState, store, {"role": "remove", "id": "1"})
    out = app.invoke(
        {"messages": [{"role": "user", "content": "a", "id": "1"}]}, {"thread_id": "t"}
    )
    assert out["messages"] == []


# -- the prebuilt tool node reads LangChain assistant messages ------------------------------


@tool(dedup="test double: changes nothing")
def weather(city: str) -> str:
    """The weather in a city."""
    return f"rain in {city}"


@pytest.mark.parametrize(
    ("state", "kind"), [(LangChainState, ToolMessage), (MessagesState, ToolMessage)]
)
def test_tool_node_runs_the_tool_calls_of_a_langchain_ai_message(state: Any, kind: type) -> None:
    def model(s: Any) -> dict[str, Any]:
        if isinstance(s["messages"][-1], HumanMessage):
            call = {"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage(f"it says: {s['messages'][-1].content}")]}

    g = StateGraph(state)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([weather]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    out = g.compile(checkpointer=InMemoryCheckpointer()).invoke(
        {"messages": [HumanMessage("weather?")]}, {"thread_id": "t"}
    )
    tool_msg = out["messages"][2]
    assert type(tool_msg) is kind and tool_msg.tool_call_id == "call_1"
    assert out["messages"][-1].content == "it says: rain in Oslo"


def test_tools_condition_reads_lists_and_langchain_messages() -> None:
    ai = AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {}}])
    assert tools_condition({"messages": [ai]}) == "tools"
    assert tools_condition([ai]) == "tools"
    assert tools_condition({"messages": [AIMessage("done")]}) == END


def test_last_message_reads_every_state_shape_as_a_dict() -> None:
    from dataclasses import dataclass, field

    from oncegraph.state.lcmessages import last_message

    @dataclass
    class Held:
        chat: list[Any] = field(default_factory=list)

    ai = AIMessage("hi", id="m1")
    assert last_message({"messages": [{"role": "user", "content": "x"}, ai]})["id"] == "m1"
    assert last_message([ai])["role"] == "assistant"
    assert last_message(Held([ai]), "chat")["content"] == "hi"
    assert last_message(Held(), "chat") == {} and last_message({"messages": None}) == {}
    assert last_message({"messages": ["not a message"]}) == {}

"""``ToolNode`` answers in the shape of the state it reads: a message list as root state
gets a list back (not ``{"messages": ...}``), LangChain messages get LangChain
``ToolMessage`` objects; each call still goes through the ledger exactly once. And
``update_state`` on a root message list applies a removal."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)

from oncegraph import END, START, StateGraph, tool
from oncegraph.state import add_messages
from oncegraph.storage.protocols import Checkpointer
from oncegraph.tools import ToolNode


class Search:
    def __init__(self) -> None:
        self.calls: list[str] = []

        @tool(effect="read")
        def search(query: str) -> str:
            """Search for the query."""
            self.calls.append(query)
            return f"result for {query}"

        self.tool = search


def asks(query: str, call_id: str, message_id: str) -> AIMessage:
    return AIMessage(
        content="",
        id=message_id,
        tool_calls=[{"id": call_id, "name": "search", "args": {"query": query}}],
    )


def root_graph(search: Search, script: list[AIMessage]) -> StateGraph:
    """An agent loop whose whole state is a LangChain message list."""
    replies = iter(script)

    def agent(messages: list[Any]) -> AIMessage:
        return next(replies)

    def more(messages: list[Any]) -> str:
        return "tools" if messages[-1].tool_calls else END

    builder = StateGraph(Annotated[list[AnyMessage], add_messages])
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search.tool]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", more, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def test_a_root_message_list_gets_a_list_of_tool_messages_back(
    checkpointer: Checkpointer,
) -> None:
    search = Search()
    script = [asks("sf", "c1", "ai1"), AIMessage(content="sunny", id="ai2")]
    app = root_graph(search, script).compile(checkpointer=checkpointer)
    config = {"thread_id": "root-1"}
    chunks = list(app.stream([HumanMessage(content="weather?")], config))
    update = chunks[1]["tools"]
    assert isinstance(update, list)  # the node's own update: a list, not a dict
    [reply] = update
    assert isinstance(reply, ToolMessage)
    assert (reply.content, reply.name, reply.tool_call_id) == ("result for sf", "search", "c1")
    out = app.get_state(config).values
    assert [type(m).__name__ for m in out] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert search.calls == ["sf"]


def test_dict_messages_get_dict_tool_messages_under_the_messages_key() -> None:
    search = Search()

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "id": "a1",
                    "tool_calls": [{"id": "c1", "name": "search", "args": {"query": "x"}}],
                }
            ]
        }

    from oncegraph.state import MessagesState

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search.tool]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    chunks = list(builder.compile().stream({"messages": [{"role": "user", "content": "hi"}]}))
    [reply] = chunks[1]["tools"]["messages"]
    assert isinstance(reply, dict)
    assert (reply["role"], reply["content"]) == ("tool", "result for x")


def test_update_state_removes_a_message_of_a_root_message_list(
    checkpointer: Checkpointer,
) -> None:
    builder = StateGraph(Annotated[list[AnyMessage], add_messages])
    builder.add_node("chatbot", lambda messages: [AIMessage(content="Hello!")])
    builder.add_edge(START, "chatbot")
    builder.add_edge("chatbot", END)
    app = builder.compile(checkpointer=checkpointer)
    config = {"thread_id": "root-2"}
    out = app.invoke([HumanMessage(content="Hi")], config)
    app.update_state(config, [RemoveMessage(id=out[-1].id)])
    values = app.get_state(config).values
    assert [m.content for m in values] == ["Hi"]

"""A LangChain chat model called inside a node streams its tokens in
``stream_mode="messages"`` (with or without passing the node's config), once each."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage

from oncegraph import START, StateGraph
from oncegraph.graph.message import add_messages


class S(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _app(pass_config: bool, tags: list[str] | None = None) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage("hello big world")]))
    if tags:
        model = model.with_config(tags=tags)  # type: ignore[assignment]

    def call(state: S, config: dict[str, Any]) -> dict[str, Any]:
        reply = model.invoke(state["messages"], config if pass_config else None)
        return {"messages": [reply]}

    g = StateGraph(S)
    g.add_node("call", call)
    g.add_edge(START, "call")
    return g.compile()


def test_tokens_stream_as_chunks_whether_or_not_the_config_is_passed() -> None:
    for pass_config in (True, False):
        chunks = list(
            _app(pass_config).stream({"messages": [("user", "hi")]}, stream_mode="messages")
        )
        assert all(isinstance(m, AIMessageChunk) for m, _ in chunks)
        assert "".join(str(m.content) for m, _ in chunks) == "hello big world"
        assert len(chunks) > 1 and {meta["langgraph_node"] for _, meta in chunks} == {"call"}


async def test_a_nostream_call_streams_its_whole_message_once() -> None:
    chunks = [
        c async for c in _app(True, ["nostream"]).astream({"messages": []}, stream_mode="messages")
    ]
    assert [type(m) for m, _ in chunks] == [AIMessage]
    assert chunks[0][0].content == "hello big world"


def test_invoke_streams_nothing_and_gets_the_whole_reply() -> None:
    out = _app(True).invoke({"messages": [("user", "hi")]})
    assert out["messages"][-1].content == "hello big world"

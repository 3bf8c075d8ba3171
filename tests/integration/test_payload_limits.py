"""Guarantee 12: an oversized value is refused with a clear error, and nothing committed is lost."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import START, StateGraph, ToolNode, _json, add_messages, tool
from oncegraph.errors import PayloadTooLargeError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus


class S(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    blob: str
    n: int


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(_json, "MAX_VALUE_BYTES", 4096)
    return 4096


def test_oversized_node_write_fails_the_run_and_keeps_earlier_state(
    checkpointer: Checkpointer, run_path: Any, small_limit: int
) -> None:
    def first(state: S) -> dict[str, Any]:
        return {"n": 1}

    def big(state: S) -> dict[str, Any]:
        return {"blob": "x" * (small_limit * 2)}

    g = StateGraph(S)
    g.add_node("first", first)
    g.add_node("big", big)
    g.add_edge(START, "first")
    g.add_edge("first", "big")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    with pytest.raises(PayloadTooLargeError, match="ONCEGRAPH_MAX_VALUE_BYTES"):
        run_path(app, {"n": 0}, cfg)
    run = app.runs(thread_id="t")[0]
    assert run.status is RunStatus.FAILED
    assert "PayloadTooLargeError" in (run.error or "")
    state = app.get_state(cfg)
    assert state.values["n"] == 1  # the committed step survives
    assert state.next == ("big",)  # and the oversized node is still the one to run


def test_oversized_input_writes_nothing(
    checkpointer: Checkpointer, run_path: Any, small_limit: int
) -> None:
    g = StateGraph(S)
    g.add_node("a", lambda s: {"n": 1})
    g.add_edge(START, "a")
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(PayloadTooLargeError):
        run_path(app, {"blob": "y" * (small_limit * 2)}, {"thread_id": "t"})
    assert app.runs(thread_id="t") == []


def test_oversized_tool_result_stops_the_run(
    checkpointer: Checkpointer, run_path: Any, small_limit: int
) -> None:
    @tool(dedup="test double: changes nothing")
    def huge() -> str:
        """Return a result over the size limit."""
        return "z" * (small_limit * 2)

    def model(state: S) -> dict[str, Any]:
        call = {"id": "call_1", "name": "huge", "args": {}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([huge]))
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(PayloadTooLargeError):
        run_path(app, {"messages": [{"role": "user", "content": "go"}]}, {"thread_id": "t"})
    assert app.runs(thread_id="t")[0].status is RunStatus.FAILED

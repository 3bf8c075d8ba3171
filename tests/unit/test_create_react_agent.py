"""``create_react_agent`` (LangGraph's call) builds oncegraph's ``ReactAgent`` graph: the
model's tool calls go through the ledger, a resumed run does not call a tool twice, and
the parts of LangGraph's signature that would run code inside the loop are refused with
the way to build it instead."""

from __future__ import annotations

from typing import Any

import pytest

from oncegraph import FaultPlan, current_effect, tool
from oncegraph.errors import ConfigError, _CrashSignal
from oncegraph.prebuilt import ToolNode, create_react_agent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import InMemoryCheckpointer

ASK = {"messages": [{"role": "user", "content": "weather in sf?"}]}


def _search(ran: list[str]) -> Any:
    @tool(dedup="test double: its key is kept in ran")
    def search(query: str) -> str:
        """Search for the query."""
        ran.append(current_effect().idempotency_key)
        return f"result for {query}"

    return search


def _model() -> ScriptedModel:
    return ScriptedModel(
        lambda messages, tools: (
            "sunny"
            if messages[-1]["role"] == "tool"
            else {"tool_calls": [{"id": "c1", "name": "search", "args": {"query": "sf"}}]}
        )
    )


def test_the_agent_calls_its_tools_then_answers() -> None:
    ran: list[str] = []
    app = create_react_agent(_model(), [_search(ran)], prompt="Be brief.")
    out = app.invoke(ASK)
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert out["messages"][-1]["content"] == "sunny"
    assert len(ran) == 1
    assert set(app.nodes) == {"agent", "tools"}


def test_a_tool_node_is_taken_and_a_crash_calls_again_with_the_same_key() -> None:
    ran: list[str] = []
    saver = InMemoryCheckpointer()
    app = create_react_agent(_model(), ToolNode([_search(ran)]), checkpointer=saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    with pytest.raises(_CrashSignal):  # the tool ran, its step (and result) not committed
        app.invoke(ASK, {"thread_id": "t", "fault_plan": FaultPlan("before_checkpoint", nth=2)})
    assert app.invoke(None, config)["messages"][-1]["content"] == "sunny"
    assert len(ran) == 2 and ran[0] == ran[1]  # an unknown outcome: the SAME key again


def test_breakpoints_are_compiled_in() -> None:
    app = create_react_agent(
        _model(), [_search([])], checkpointer=InMemoryCheckpointer(), interrupt_before=["tools"]
    )
    config = {"configurable": {"thread_id": "t"}}
    app.invoke(ASK, config)
    assert app.get_state(config).next == ("tools",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pre_model_hook": lambda s: s},
        {"post_model_hook": lambda s: s},
        {"prompt": lambda s: s["messages"]},
    ],
)
def test_code_inside_the_loop_is_refused_with_the_way_to_build_it(kwargs: Any) -> None:
    with pytest.raises(ConfigError, match="build the graph instead"):
        create_react_agent(_model(), [], **kwargs)

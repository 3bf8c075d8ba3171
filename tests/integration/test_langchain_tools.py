"""LangChain tools run under the ledger: ``as_tool`` converts a real ``StructuredTool``
(name, description, argument schema), and ``ToolNode`` / ``ReactAgent`` accept one as is.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.tools import StructuredTool
from langchain_core.tools import tool as lc_tool

from oncegraph.errors import ConfigError, UnkeyedToolWarning
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass, EffectStatus
from oncegraph.tools import ToolNode, as_tool


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


def _ticket_tool(calls: list[dict[str, Any]]) -> StructuredTool:
    def open_ticket(title: str, priority: Priority = Priority.LOW) -> str:
        """Open a support ticket.

        Args:
            title: One line that says what is wrong.
            priority: How urgent it is.
        """
        calls.append(
            {"title": title, "priority": priority, "thread": threading.current_thread().name}
        )
        return f"ticket '{title}' ({priority.value})"

    return StructuredTool.from_function(open_ticket, parse_docstring=True)


def test_as_tool_keeps_name_description_and_schema() -> None:
    lc = _ticket_tool([])
    t = as_tool(lc, effect="irreversible", recipient="helpdesk")
    assert t.name == "open_ticket"
    assert t.description == "Open a support ticket."
    assert t.effect is EffectClass.IRREVERSIBLE
    assert t.recipient == "helpdesk"
    expected = lc.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    expected.pop("title", None)
    expected.pop("description", None)
    assert t.parameters == expected
    props = t.parameters["properties"]
    assert props["title"]["description"] == "One line that says what is wrong."
    assert t.parameters["$defs"]["Priority"]["enum"] == ["low", "high"]
    assert not t.is_async  # a sync function: run in oncegraph's worker thread
    assert as_tool(lc, name="ticket", description="Open one.").name == "ticket"


def test_structured_tool_runs_under_the_ledger_in_a_react_agent(checkpointer: Checkpointer) -> None:
    calls: list[dict[str, Any]] = []
    model = ScriptedModel.turns(
        {
            "content": "",
            "tool_calls": [
                {"name": "open_ticket", "args": {"title": "Printer on fire", "priority": "urgent"}}
            ],
        },
        {
            "content": "",
            "tool_calls": [
                {"name": "open_ticket", "args": {"title": "Printer on fire", "priority": "high"}}
            ],
        },
        "Ticket opened.",
    )
    agent = ReactAgent(model=model, tools=[_ticket_tool(calls)])
    # a LangChain tool is a write tool like any other: it is told it never reads its key
    with pytest.warns(UnkeyedToolWarning, match="'open_ticket' never reads"):
        app = agent.compile(checkpointer=checkpointer)
    out = app.invoke({"messages": [{"role": "user", "content": "Help!"}]}, {"thread_id": "t"})

    tool_messages = [m for m in out["messages"] if m["role"] == "tool"]
    assert [m["status"] for m in tool_messages] == ["error", "success"]
    assert "priority: Input should be 'low' or 'high' (got 'urgent')" in tool_messages[0]["content"]
    assert tool_messages[1]["content"] == "ticket 'Printer on fire' (high)"
    assert len(calls) == 1
    assert calls[0]["priority"] is Priority.HIGH
    assert calls[0]["thread"] != threading.main_thread().name
    (spec,) = model.tools_seen[0]
    assert spec["name"] == "open_ticket" and spec["description"] == "Open a support ticket."

    (effect,) = [e for e in app.effects(thread_id="t") if e.effect_type == "open_ticket"]
    assert effect.status is EffectStatus.COMPLETED
    assert effect.effect_class is EffectClass.WRITE  # the default, as for a plain function
    assert effect.request == {"title": "Printer on fire", "priority": "high"}



def test_tool_node_accepts_a_coroutine_langchain_tool(checkpointer: Checkpointer) -> None:
    seen: list[str] = []

    @lc_tool
    async def lookup(order_id: str) -> dict[str, str]:
        """Look an order up."""
        await asyncio.sleep(0)
        seen.append(order_id)
        return {"order_id": order_id, "status": "shipped"}

    node = ToolNode([lookup])
    assert node.tools["lookup"].is_async
    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"name": "lookup", "args": {"order_id": "7"}}]},
        "It shipped.",
    )
    app = ReactAgent(model=model, tools=[as_tool(lookup, effect="read")]).compile(
        checkpointer=checkpointer
    )
    out = app.invoke({"messages": [{"role": "user", "content": "Where is 7?"}]}, {"thread_id": "t"})
    assert seen == ["7"]
    tool_message = next(m for m in out["messages"] if m["role"] == "tool")
    assert tool_message["status"] == "success"
    assert '"status":"shipped"' in tool_message["content"]


def test_a_langchain_tool_without_a_description_is_refused() -> None:
    def nameless(x: int) -> int:
        return x

    lc = StructuredTool.from_function(nameless, description="")
    with pytest.raises(ConfigError, match="has no description"):
        as_tool(lc)
    assert as_tool(lc, description="Echo a number.").description == "Echo a number."

"""A ``write`` tool that never hands its idempotency key to the recipient is told so at
compile (a warning; ``strict=True``: an error), however it became a tool: ``@tool``, a
plain function, a LangChain tool, a ``ToolNode`` in a ``StateGraph`` or a ``ReactAgent``.
Reading the key (directly, through an alias, or in a helper of the same module) or saying
how the recipient deduplicates otherwise (``dedup=``) keeps it quiet."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.tools import StructuredTool

from oncegraph import END, START, MessagesState, StateGraph, ToolNode, current_effect, tool
from oncegraph import current_effect as effect_now
from oncegraph.errors import ConfigError, UnkeyedToolWarning
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.tools import as_tool
from oncegraph.tools.keycheck import reads_key

SENT: list[Any] = []


def _agent(*tools: Any) -> ReactAgent:
    return ReactAgent(ScriptedModel.turns("done"), tools=list(tools))


def _quiet(agent: ReactAgent) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.compile()


def _send(order_id: str) -> str:
    """A helper of this module that hands the key over."""
    SENT.append((order_id, current_effect().idempotency_key))
    return "sent"


def test_a_write_tool_that_never_reads_its_key_is_warned_about_naming_the_fixes() -> None:
    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        SENT.append(order_id)
        return "refunded"

    with pytest.warns(UnkeyedToolWarning) as caught:
        _agent(refund).compile()
    (warning,) = caught.list
    text = str(warning.message)
    assert "write tool 'refund' never reads the idempotency key" in text
    assert "current_effect().idempotency_key" in text
    assert 'effect="irreversible", reconcile=' in text and 'dedup="' in text
    assert warning.filename == __file__, "it points at the caller's compile line"


def test_strict_makes_it_an_error_naming_every_tool() -> None:
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    def notify(order_id: str) -> str:
        """Tell the customer."""
        return "sent"

    with pytest.raises(ConfigError, match=r"write tools 'refund', 'notify' never read"):
        _agent(refund, notify).compile(strict=True)


def test_a_tool_node_in_a_state_graph_is_checked_too() -> None:
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    g = StateGraph(MessagesState)
    g.add_node("tools", ToolNode([refund]))
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    with pytest.warns(UnkeyedToolWarning, match="'refund'"):
        g.compile()
    with pytest.raises(ConfigError, match="'refund'"):
        g.compile(strict=True)


def test_reading_the_key_directly_through_an_alias_or_a_helper_is_quiet() -> None:
    @tool
    def direct(order_id: str) -> str:
        """Refund, keyed."""
        return f"{order_id}:{current_effect().idempotency_key}"

    @tool
    def aliased(order_id: str) -> str:
        """Refund, keyed through an alias."""
        return f"{order_id}:{effect_now().effect_id}"

    @tool
    def helped(order_id: str) -> str:
        """Refund through a helper of this module."""
        return _send(order_id)

    async def coroutine(order_id: str) -> str:
        """Refund, async, keyed in a nested function."""

        def key() -> str:
            return current_effect().idempotency_key

        return key()

    _quiet(_agent(direct, aliased, helped, coroutine))


def test_saying_how_the_recipient_deduplicates_is_quiet_and_must_say_something() -> None:
    @tool(dedup="natural key: order_id (the shop refunds an order once)")
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    assert refund.dedup == "natural key: order_id (the shop refunds an order once)"
    _quiet(_agent(refund))
    with pytest.raises(ConfigError, match="dedup= says in words"):

        @tool(dedup="  ")
        def empty(order_id: str) -> str:
            """Refund an order."""
            return "refunded"


def test_read_and_irreversible_tools_are_not_checked() -> None:
    @tool(effect="read")
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return "found"

    @tool(effect="irreversible")
    def wire(order_id: str) -> str:
        """Wire money."""
        return "wired"

    _quiet(_agent(lookup, wire))


def test_a_key_handed_over_by_another_module_is_not_seen() -> None:
    """One level, in the tool's own module: a client of another module is not read."""
    client = ScriptedModel  # any object of another module

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return str(client.turns(order_id))

    with pytest.warns(UnkeyedToolWarning):
        _agent(refund).compile()


def test_langchain_tools_are_read_through_their_own_function() -> None:
    def keyed(order_id: str) -> str:
        """Refund an order, keyed."""
        return current_effect().idempotency_key

    def unkeyed(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    _quiet(_agent(StructuredTool.from_function(keyed)))
    with pytest.warns(UnkeyedToolWarning, match="'unkeyed'"):
        _agent(StructuredTool.from_function(unkeyed)).compile()
    quiet = as_tool(StructuredTool.from_function(unkeyed), dedup="the ticket system merges")
    _quiet(_agent(quiet))


def test_code_that_cannot_be_read_is_not_flagged() -> None:
    assert reads_key(len) is None
    assert reads_key(_send) is True

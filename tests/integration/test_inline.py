"""``inline=True``: sync nodes and tools called on the event loop thread.

By default a sync node or tool runs in a worker thread, so a timeout can be enforced and
a slow call does not stall other runs on the loop. ``add_node(..., inline=True)`` and
``@tool(inline=True)`` skip that hand-off for quick, CPU-only callables. Everything else
stays the same on every path: the ledger records inline tools the same way, crashes are
recovered the same way, and ``current_effect()`` works. What changes is stated: no
timeout applies, and the sync ``effect()`` helper is refused (it would block its loop).

A callable can tell where it runs: ``asyncio.get_running_loop()`` succeeds only on the
event loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, FaultPlan, StateGraph, ToolNode, add_messages, current_effect
from oncegraph import effect as effect_helper
from oncegraph import tool as make_tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, GraphValidationError, _CrashSignal
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
OVERRUN = 0.15  # seconds an inline callable blocks; three times the timeout below
TIMEOUT = 0.05


def on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    inline_on_loop: bool
    threaded_on_loop: bool


def two_nodes(checkpointer: Checkpointer) -> CompiledGraph:
    g = StateGraph(S)
    g.add_node("fast", lambda s: {"inline_on_loop": on_loop()}, inline=True)
    g.add_node("plain", lambda s: {"threaded_on_loop": on_loop()})
    g.add_edge(START, "fast")
    g.add_edge("fast", "plain")
    g.add_edge("plain", END)
    return g.compile(checkpointer=checkpointer)


def one_inline_node(checkpointer: Checkpointer, fn: Callable[..., Any]) -> CompiledGraph:
    g = StateGraph(S)
    g.add_node("only", fn, inline=True)
    g.add_edge(START, "only")
    g.add_edge("only", END)
    return g.compile(checkpointer=checkpointer)


def tool_graph(checkpointer: Checkpointer, fn: Callable[..., Any]) -> CompiledGraph:
    """One scripted assistant turn calling ``fn`` once, then the ToolNode."""
    name = getattr(fn, "name", None) or fn.__name__

    def model(state: S) -> dict[str, Any]:
        call = {"id": "call_1", "name": name, "args": {"order_id": "1042"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("model", model, inline=True)
    g.add_node("tools", ToolNode([fn]))
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=checkpointer)


def tool_message(values: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in values["messages"] if m["role"] == "tool")


# -- nodes -------------------------------------------------------------------------------


def test_inline_node_runs_on_the_loop_and_a_plain_sync_node_in_a_thread(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = two_nodes(checkpointer)
    out = run_path(app, {}, {"thread_id": "t"})
    assert out["inline_on_loop"] is True
    assert out["threaded_on_loop"] is False
    assert app.runs(thread_id="t")[0].status is RunStatus.COMPLETED


def test_inline_node_is_not_timed_out(checkpointer: Checkpointer, run_path: RunPath) -> None:
    def blocking(state: S) -> dict[str, Any]:
        time.sleep(OVERRUN)
        return {"inline_on_loop": on_loop()}

    app = one_inline_node(checkpointer, blocking)
    out = run_path(app, {}, {"thread_id": "t", "node_timeout": TIMEOUT})
    assert out["inline_on_loop"] is True


def test_inline_node_that_fails_fails_its_run_resumably(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[int] = []

    def flaky(state: S) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return {"inline_on_loop": on_loop()}

    app = one_inline_node(checkpointer, flaky)
    with pytest.raises(Exception, match="first call fails"):
        run_path(app, {}, {"thread_id": "t"})
    assert app.runs(thread_id="t")[0].status is RunStatus.FAILED
    assert run_path(app, None, {"thread_id": "t"})["inline_on_loop"] is True
    assert len(calls) == 2


def test_add_node_refuses_inline_coroutines_and_inline_with_timeout() -> None:
    async def coro(state: S) -> dict[str, Any]:
        return {}

    g = StateGraph(S)
    with pytest.raises(GraphValidationError, match="coroutine function; inline=True is for sync"):
        g.add_node("coro", coro, inline=True)
    with pytest.raises(GraphValidationError, match="pass timeout= or inline=True, not both"):
        g.add_node("both", lambda s: {}, inline=True, timeout=1.0)
    assert not g.nodes


def test_effect_helper_in_an_inline_node_names_the_fix(checkpointer: Checkpointer) -> None:
    def pays(state: S) -> dict[str, Any]:
        effect_helper(lambda: "charged", effect_type="charge")
        return {}

    app = one_inline_node(checkpointer, pays)
    with pytest.raises(ConfigError, match="do not mark a node that calls effect\\(\\) inline"):
        app.invoke({}, {"thread_id": "t"})
    assert app.effects(thread_id="t") == []


# -- tools -------------------------------------------------------------------------------


def test_inline_tool_goes_through_the_ledger_on_the_loop(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    seen: list[tuple[bool, str]] = []

    @make_tool(inline=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        ctx = current_effect()
        assert ctx is not None
        seen.append((on_loop(), ctx.effect_id))
        return f"refunded {order_id}"

    app = tool_graph(checkpointer, refund)
    out = run_path(app, {}, {"thread_id": "t"})
    assert tool_message(out)["content"] == "refunded 1042"
    assert [on for on, _ in seen] == [True]
    [record] = app.effects(thread_id="t")
    assert record.status is EffectStatus.COMPLETED
    assert record.effect_id == seen[0][1]
    assert record.result == "refunded 1042"


def test_inline_tool_is_not_timed_out(checkpointer: Checkpointer, run_path: RunPath) -> None:
    @make_tool(inline=True, dedup="test double: sleeps, changes nothing")
    def slow_refund(order_id: str) -> str:
        """Refund an order, slowly."""
        time.sleep(OVERRUN)
        return f"refunded {order_id}"

    app = tool_graph(checkpointer, slow_refund)
    out = run_path(app, {}, {"thread_id": "t", "tool_timeout": TIMEOUT})
    message = tool_message(out)
    assert (message["status"], message["content"]) == ("success", "refunded 1042")
    assert app.effects(thread_id="t")[0].status is EffectStatus.COMPLETED


@pytest.mark.parametrize("point", ["after_intent", "after_tool_return", "before_checkpoint"])
def test_inline_tool_recovers_like_any_tool(checkpointer: Checkpointer, point: str) -> None:
    """A crash at each boundary of the tool step, then a resume: the same idempotency key,
    one completed record, and the tool called again only when its outcome was unknown."""
    keys: list[str] = []

    @make_tool(inline=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        ctx = current_effect()
        assert ctx is not None
        keys.append(ctx.effect_id)
        return f"refunded {order_id}"

    app = tool_graph(checkpointer, refund)
    nth = 2 if point == "before_checkpoint" else 1  # the model step hits it first
    with pytest.raises(_CrashSignal):
        app.invoke({}, {"thread_id": "t", "fault_plan": FaultPlan(point, nth)})
    out = app.invoke(None, {"thread_id": "t"})
    assert tool_message(out)["content"] == "refunded 1042"
    expected_calls = 1 if point == "after_intent" else 2  # write: again with the same key
    assert len(keys) == expected_calls
    assert len(set(keys)) == 1
    [record] = app.effects(thread_id="t")
    assert record.status is EffectStatus.COMPLETED
    assert record.effect_id == keys[0]


def test_tool_refuses_inline_coroutines_and_inline_with_timeout() -> None:
    async def coro(order_id: str) -> str:
        return order_id

    def plain(order_id: str) -> str:
        return order_id

    with pytest.raises(ConfigError, match="coroutine function; inline=True is for sync"):
        make_tool(inline=True)(coro)
    with pytest.raises(ConfigError, match="pass timeout= or inline=True, not both"):
        make_tool(inline=True, timeout=1.0)(plain)

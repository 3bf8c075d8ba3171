"""Timeouts: ``node_timeout`` and ``tool_timeout`` on every path, and their config.

A node that overruns fails the run with ``NodeTimeoutError`` (resumable). A tool that
overruns has an UNKNOWN outcome: ``ToolTimeoutError``, the effect record stays
``pending``, and the resumed run calls again with the SAME idempotency key. Nodes and
tools that overrun wait on events the test sets afterwards, so no worker thread
outlives its test and nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, ToolNode, add_messages, current_effect, tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ConfigError,
    NodeError,
    NodeTimeoutError,
    RunBusyError,
    ToolTimeoutError,
)
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
SHORT = 0.05  # seconds: the timeout under test
LONG = 30.0  # how long an overrunning node would wait if nobody released it


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    done: str


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown so that blocked sync nodes and tools end with their test."""
    event = threading.Event()
    yield event
    event.set()


def _status(app: CompiledGraph, thread_id: str) -> RunStatus:
    return app.runs(thread_id=thread_id, limit=1)[0].status


def _one(checkpointer: Checkpointer | None, node: Callable[..., Any], **kw: Any) -> CompiledGraph:
    g = StateGraph(S)
    g.add_node("slow", node, **kw)
    g.add_edge(START, "slow")
    g.add_edge("slow", END)
    return g.compile(checkpointer=checkpointer)


# -- node_timeout ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_node_timeout_fails_the_run_resumably(
    checkpointer: Checkpointer, run_path: RunPath, release: threading.Event, kind: str
) -> None:
    calls: list[str] = []
    hang = [True]

    async def slow_async(state: S) -> dict[str, Any]:
        calls.append("slow")
        if hang[0]:
            await asyncio.sleep(LONG)
        return {"done": "yes"}

    def slow_sync(state: S) -> dict[str, Any]:
        calls.append("slow")
        if hang[0]:
            release.wait(LONG)
        return {"done": "yes"}

    app = _one(checkpointer, slow_async if kind == "async" else slow_sync)
    cfg = {"thread_id": "t"}
    with pytest.raises(NodeTimeoutError, match=r"node 'slow' ran longer than node_timeout=0\.05s"):
        run_path(app, {"messages": ["hi"]}, {**cfg, "node_timeout": SHORT})
    release.set()
    run = app.runs(thread_id="t")[0]
    assert run.status is RunStatus.FAILED and "NodeTimeoutError" in (run.error or "")
    assert app.get_state(cfg).next == ("slow",)
    assert issubclass(NodeTimeoutError, NodeError) and issubclass(NodeTimeoutError, TimeoutError)

    hang[0] = False  # the resume gets a limit no loaded machine reaches
    out = run_path(app, None, {**cfg, "node_timeout": LONG})
    assert out["done"] == "yes" and calls == ["slow", "slow"]
    assert _status(app, "t") is RunStatus.COMPLETED


def test_per_node_timeout_overrides_the_run_setting(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    async def slow(state: S) -> dict[str, Any]:
        await asyncio.sleep(LONG)
        return {"done": "never"}

    app = _one(checkpointer, slow, timeout=SHORT)
    with pytest.raises(NodeTimeoutError, match=r"node_timeout=0\.05s"):
        run_path(app, {}, {"thread_id": "t", "node_timeout": None})


@pytest.mark.parametrize("disabled", [None, 0])
def test_none_or_zero_disables_node_timeout(
    checkpointer: Checkpointer, run_path: RunPath, disabled: float | None
) -> None:
    async def nap(state: S) -> dict[str, Any]:
        await asyncio.sleep(0.1)  # longer than SHORT, but no limit applies
        return {"done": "slept"}

    app = _one(checkpointer, nap)
    out = run_path(app, {}, {"thread_id": "t", "node_timeout": disabled})
    assert out["done"] == "slept"
    stored = app.runs(thread_id="t")[0].config
    assert stored["node_timeout"] is None


@pytest.mark.parametrize("key", ["node_timeout", "tool_timeout"])
@pytest.mark.parametrize("bad", [-1, "5", True, [1]])
def test_bad_timeout_values_are_config_errors(run_path: RunPath, key: str, bad: Any) -> None:
    calls: list[str] = []
    app = _one(None, lambda s: calls.append("ran"))
    with pytest.raises(ConfigError, match=f"{key} must be a number of seconds, or None/0"):
        run_path(app, {}, {key: bad})
    assert calls == []


def test_timeouts_are_stored_with_the_run(checkpointer: Checkpointer) -> None:
    app = _one(checkpointer, lambda s: None)
    app.invoke({}, {"thread_id": "t", "node_timeout": 12, "tool_timeout": 3.5})
    config = app.runs(thread_id="t")[0].config
    assert config["node_timeout"] == 12.0 and config["tool_timeout"] == 3.5


# -- tool_timeout ------------------------------------------------------------------------


def _agent(checkpointer: Checkpointer, tools: list[Any], name: str) -> CompiledGraph:
    # A coroutine that never suspends cannot be timed out however loaded the machine is,
    # so a short node_timeout can only ever hit the tools node.
    async def agent(state: S) -> dict[str, Any]:
        last = state["messages"][-1]
        if last["role"] == "tool":
            return {"done": last["content"]}
        call = {"id": "call_1", "name": name, "args": {"order": "o1"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if "done" in s else "tools", ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def test_tool_timeout_is_an_unknown_outcome_and_resume_reuses_the_key(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    keys: list[str] = []
    hang = [True]

    @tool(dedup="test double: changes nothing a repeat could double")
    async def ship(order: str) -> str:
        """Ship an order."""
        keys.append(current_effect().idempotency_key)
        if hang[0]:
            await asyncio.sleep(LONG)
        return f"shipped {order}"

    app = _agent(checkpointer, [ship], "ship")
    cfg = {"thread_id": "t", "tool_timeout": SHORT}
    with pytest.raises(
        ToolTimeoutError, match=r"ship timed out after 0\.05s; its outcome is unknown"
    ):
        run_path(app, {"messages": ["go"]}, cfg)
    assert _status(app, "t") is RunStatus.FAILED
    (record,) = app.effects(thread_id="t")
    assert record.status is EffectStatus.PENDING
    assert record.attempts[-1].outcome == "timeout"

    hang[0] = False  # the resume gets a limit no loaded machine reaches
    out = run_path(app, None, {**cfg, "tool_timeout": LONG})
    assert out["done"] == "shipped o1"
    assert len(keys) == 2 and keys[0] == keys[1] == record.effect_id
    (record,) = app.effects(thread_id="t")
    assert record.status is EffectStatus.COMPLETED


def test_sync_tool_timeout(
    checkpointer: Checkpointer, run_path: RunPath, release: threading.Event
) -> None:
    @tool(dedup="test double: changes nothing a repeat could double")
    def ship(order: str) -> str:
        """Ship an order."""
        release.wait(LONG)
        return "late"

    app = _agent(checkpointer, [ship], "ship")
    cfg = {"thread_id": "t", "tool_timeout": SHORT, "tool_grace": SHORT}
    with pytest.raises(ToolTimeoutError, match=r"ship timed out .* still running"):
        run_path(app, {"messages": ["go"]}, cfg)
    (record,) = app.effects(thread_id="t")
    assert record.status is EffectStatus.PENDING and record.attempts[-1].ended_at is None
    # The call is still in flight: the run stays held, and a resume is refused at once.
    with pytest.raises(RunBusyError, match="being executed by another process"):
        run_path(app, None, cfg)
    release.set()  # the call ends: its late outcome is recorded, then the run is let go
    deadline = time.monotonic() + 120
    while app.effects(thread_id="t")[0].status is not EffectStatus.COMPLETED:
        assert time.monotonic() < deadline, "the late outcome was never recorded"
        time.sleep(0.01)
    (record,) = app.effects(thread_id="t")
    assert record.result == "late" and record.attempts[-1].outcome == "completed"
    deadline = time.monotonic() + 120
    while True:  # the claim is let go right after the record
        try:
            out = run_path(app, None, {**cfg, "tool_timeout": LONG})
            break
        except RunBusyError:
            assert time.monotonic() < deadline, "the run was never let go"
            time.sleep(0.01)
    assert out["done"] == "late"
    assert [m["content"] for m in out["messages"] if m["role"] == "tool"] == ["late"]


def test_per_tool_timeout_overrides_the_run_setting(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    @tool(timeout=SHORT, dedup="test double: never finishes")
    async def ship(order: str) -> str:
        """Ship an order."""
        await asyncio.sleep(LONG)
        return "never"

    app = _agent(checkpointer, [ship], "ship")
    with pytest.raises(ToolTimeoutError, match=r"after 0\.05s"):
        run_path(app, {"messages": ["go"]}, {"thread_id": "t", "tool_timeout": None})


@pytest.mark.parametrize("disabled", [None, 0])
def test_none_or_zero_disables_tool_timeout(
    checkpointer: Checkpointer, run_path: RunPath, disabled: float | None
) -> None:
    @tool(dedup="test double: changes nothing a repeat could double")
    async def ship(order: str) -> str:
        """Ship an order."""
        await asyncio.sleep(0.1)
        return "slow but fine"

    app = _agent(checkpointer, [ship], "ship")
    out = run_path(app, {"messages": ["go"]}, {"thread_id": "t", "tool_timeout": disabled})
    assert out["done"] == "slow but fine"


def test_node_timeout_bounds_a_tool_node_too(checkpointer: Checkpointer, run_path: RunPath) -> None:
    @tool(dedup="test double: changes nothing a repeat could double")
    async def ship(order: str) -> str:
        """Ship an order."""
        await asyncio.sleep(LONG)
        return "never"

    app = _agent(checkpointer, [ship], "ship")
    with pytest.raises(NodeTimeoutError, match="node 'tools'"):
        run_path(
            app,
            {"messages": ["go"]},
            {"thread_id": "t", "tool_timeout": None, "node_timeout": SHORT},
        )
    assert _status(app, "t") is RunStatus.FAILED

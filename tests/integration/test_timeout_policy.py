"""``add_node(timeout=TimeoutPolicy(...))``: run and idle timeouts of one attempt, on
every store and run path. Progress (a streamed chunk, ``runtime.heartbeat()``) keeps an
idle attempt alive; a cut attempt is ``NodeTimeoutError`` with its ``kind``, which a
retry policy may retry; a tool call the cut interrupts is an unknown outcome that the
resume calls again with the SAME idempotency key (never a fresh, blind send)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, ToolNode, add_messages, current_effect, tool
from oncegraph.constants import CONFIG_KEY_TIMED_ATTEMPT_OBSERVER
from oncegraph.errors import ConfigError, NodeTimeoutError
from oncegraph.func import entrypoint, task
from oncegraph.runtime import Runtime
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus
from oncegraph.types import RetryPolicy, TimeoutPolicy

SHORT = 0.05
LONG = 30.0


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    x: int
    done: str


def _one(checkpointer: Checkpointer | None, node: Any, **kw: Any) -> Any:
    g = StateGraph(S)
    g.add_node("slow", node, **kw)
    g.add_edge(START, "slow")
    g.add_edge("slow", END)
    return g.compile(checkpointer=checkpointer)


def test_an_idle_attempt_is_cut_and_says_so(checkpointer: Checkpointer, run_path: Any) -> None:
    async def slow(state: S) -> dict[str, Any]:
        await asyncio.sleep(LONG)
        return {"x": 1}

    app = _one(checkpointer, slow, timeout=TimeoutPolicy(idle_timeout=SHORT))
    with pytest.raises(NodeTimeoutError, match="no progress") as caught:
        run_path(app, {"x": 0}, {"thread_id": "t"})
    assert (caught.value.node, caught.value.kind, caught.value.idle_timeout) == (
        "slow",
        "idle",
        SHORT,
    )


def test_progress_keeps_an_idle_attempt_alive_but_not_past_its_run_cap(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    async def beating(state: S, runtime: Runtime) -> dict[str, Any]:
        for _ in range(6):  # 6 x 0.02 s > the idle limit, each gap well under it
            await asyncio.sleep(0.02)
            runtime.heartbeat()
        return {"x": 1}

    policy = TimeoutPolicy(idle_timeout=timedelta(milliseconds=80), refresh_on="heartbeat")
    app = _one(checkpointer, beating, timeout=policy)
    assert run_path(app, {"x": 0}, {"thread_id": "t"})["x"] == 1

    capped = _one(
        checkpointer, beating, timeout=TimeoutPolicy(run_timeout=SHORT, idle_timeout=1.0)
    )
    with pytest.raises(NodeTimeoutError) as caught:
        run_path(capped, {"x": 0}, {"thread_id": "t2"})
    assert caught.value.kind == "run"


def test_a_timed_out_attempt_is_retried(checkpointer: Checkpointer, run_path: Any) -> None:
    attempts: list[int] = []

    async def flaky(state: S) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.sleep(LONG)
        return {"x": len(attempts)}

    retry = RetryPolicy(initial_interval=0, jitter=False, retry_on=NodeTimeoutError)
    app = _one(checkpointer, flaky, timeout=TimeoutPolicy(idle_timeout=SHORT), retry_policy=retry)
    assert run_path(app, {"x": 0}, {"thread_id": "t"})["x"] == 2


def test_policies_are_checked_when_declared() -> None:
    def sync_node(state: S) -> dict[str, Any]:
        return {}

    with pytest.raises(ConfigError, match="greater than 0"):
        StateGraph(S).add_node("n", sync_node, timeout=0)
    with pytest.raises(ConfigError, match="greater than 0"):
        TimeoutPolicy(idle_timeout=-1)
    g = StateGraph(S)
    g.add_node("n", sync_node, timeout=TimeoutPolicy(idle_timeout=1))
    g.add_edge(START, "n")
    with pytest.raises(ConfigError, match="only supported for async nodes"):
        g.compile()
    with pytest.raises(ConfigError, match="only supported for async nodes"):
        task(timeout=TimeoutPolicy(idle_timeout=1))(lambda x: x)
    with pytest.raises(ConfigError, match="greater than 0"):
        entrypoint(timeout=0)
    g2 = StateGraph(S)  # a plain number stays oncegraph's timeout, fine on a sync node
    g2.add_node("n", sync_node, timeout=5)
    g2.add_edge(START, "n")
    g2.compile()


async def test_a_task_and_an_entrypoint_under_a_policy() -> None:
    @task(timeout=TimeoutPolicy(idle_timeout=SHORT))
    async def slow_task(x: int) -> int:
        await asyncio.sleep(LONG)
        return x

    @entrypoint()
    async def flow(x: int) -> int:
        return await slow_task(x)

    with pytest.raises(NodeTimeoutError):
        await flow.ainvoke(1)

    @entrypoint(timeout=TimeoutPolicy(idle_timeout=SHORT))
    async def slow_flow(x: int) -> int:
        await asyncio.sleep(LONG)
        return x

    with pytest.raises(NodeTimeoutError):
        await slow_flow.ainvoke(1)


def test_a_tool_call_cut_by_an_idle_timeout_is_called_again_with_its_key(
    checkpointer: Checkpointer, run_path: Any
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

    async def agent(state: S) -> dict[str, Any]:
        last = state["messages"][-1]
        if last["role"] == "tool":
            return {"done": last["content"]}
        call = {"id": "call_1", "name": "ship", "args": {"order": "o1"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([ship]), timeout=TimeoutPolicy(idle_timeout=SHORT))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if "done" in s else "tools", ["tools", END])
    g.add_edge("tools", "agent")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t", "tool_timeout": None}
    with pytest.raises(NodeTimeoutError, match="'tools'"):
        run_path(app, {"messages": ["go"]}, cfg)
    (record,) = app.effects(thread_id="t")
    assert record.status is EffectStatus.PENDING  # its outcome is unknown, not failed

    hang[0] = False
    out = run_path(app, None, cfg)
    assert out["done"] == "shipped o1"
    assert len(keys) == 2 and keys[0] == keys[1] == record.effect_id


def _fanned(checkpointer: Checkpointer | None, node: Any, timeout: Any) -> Any:
    from oncegraph import Send

    g = StateGraph(S)
    g.add_node("slow", node, timeout=TimeoutPolicy(idle_timeout=LONG))
    g.add_conditional_edges(START, lambda s: [Send("slow", s, timeout=timeout)])
    g.add_edge("slow", END)
    return g.compile(checkpointer=checkpointer)


def test_a_send_timeout_stands_for_the_node_timeout(checkpointer: Checkpointer) -> None:
    calls: list[int] = []

    async def slow(state: S) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(LONG)
        return {"x": state["x"] + 1}

    app = _fanned(checkpointer, slow, TimeoutPolicy(idle_timeout=SHORT))
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(NodeTimeoutError) as caught:
        app.invoke({"x": 1}, config)
    assert (caught.value.kind, caught.value.idle_timeout) == ("idle", SHORT)
    # the send, its timeout with it, is kept in the checkpoint: a fresh app resumes it
    again = _fanned(checkpointer, slow, None)
    assert again.invoke(None, config)["x"] == 2
    assert len(calls) == 2


def test_a_send_timeout_in_seconds_caps_a_sync_node() -> None:
    import time

    def slow(state: S) -> dict[str, Any]:
        time.sleep(0.5)
        return {"x": 1}

    from oncegraph import Send

    g = StateGraph(S)
    g.add_node("slow", slow)
    g.add_conditional_edges(START, lambda s: [Send("slow", s, timeout=timedelta(seconds=SHORT))])
    with pytest.raises(NodeTimeoutError):
        g.compile().invoke({"x": 0})
    g2 = StateGraph(S)
    g2.add_node("slow", slow)
    g2.add_conditional_edges(
        START, lambda s: [Send("slow", s, timeout=TimeoutPolicy(idle_timeout=SHORT))]
    )
    with pytest.raises(Exception, match="idle timeout needs an async node"):
        g2.compile().invoke({"x": 0})


def test_an_observer_sees_each_timed_attempt_finish_before_the_handler_runs(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    seen: list[Any] = []
    order: list[str] = []

    async def slow(state: S) -> dict[str, Any]:
        await asyncio.sleep(LONG)
        return {"done": "never"}

    async def handler(state: S) -> dict[str, Any]:
        order.append(f"handler after {len(seen)} events")
        return {"done": "handled"}

    def observe(event: Any) -> None:
        seen.append(event)
        if event.event == "start" and len(seen) == 1:
            raise RuntimeError("an observer's own failure")  # logged, never the run's

    app = _one(
        checkpointer,
        slow,
        timeout=TimeoutPolicy(run_timeout=LONG, idle_timeout=SHORT),
        retry_policy=RetryPolicy(
            max_attempts=2, initial_interval=0, jitter=False, retry_on=NodeTimeoutError
        ),
        error_handler=handler,
    )
    config = {"thread_id": "t", "configurable": {CONFIG_KEY_TIMED_ATTEMPT_OBSERVER: observe}}
    assert run_path(app, {"x": 0}, config)["done"] == "handled"
    assert [(e.event, e.status, e.context.attempt) for e in seen] == [
        ("start", None, 1),
        ("finish", "error", 1),
        ("start", None, 2),
        ("finish", "error", 2),
    ]
    assert order == ["handler after 4 events"]
    first = seen[0].context
    assert (first.task_name, first.run_timeout_secs, first.idle_timeout_secs) == (
        "slow",
        LONG,
        SHORT,
    )
    assert first.refresh_on == "auto" and first.thread_id == "t"
    assert seen[1].context is first and seen[1].error_type == "NodeTimeoutError"
    assert "no progress" in (seen[1].error_message or "")


def test_an_observer_sees_progress_and_a_success(checkpointer: Checkpointer) -> None:
    seen: list[Any] = []

    async def beating(state: S, runtime: Runtime) -> dict[str, Any]:
        for _ in range(3):  # each gap at least idle_timeout / 4, well under idle_timeout
            await asyncio.sleep(0.11)
            runtime.heartbeat()
        for _ in range(3):  # these come too soon after the last progress event
            runtime.heartbeat()
        return {"x": 1}

    policy = TimeoutPolicy(idle_timeout=0.4, refresh_on="heartbeat")
    app = _one(checkpointer, beating, timeout=policy)
    config = {"thread_id": "t", "configurable": {CONFIG_KEY_TIMED_ATTEMPT_OBSERVER: seen.append}}
    assert app.invoke({"x": 0}, config)["x"] == 1
    assert [e.event for e in seen] == ["start", "progress", "progress", "progress", "finish"]
    assert seen[-1].status == "success" and seen[-1].error_type is None
    assert all(e.context is seen[0].context for e in seen)
    assert all(e.progress_at is not None for e in seen[1:4])

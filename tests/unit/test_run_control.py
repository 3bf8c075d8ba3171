"""``invoke(..., control=RunControl())``: a drain stops a run between steps, keeps what
finished and leaves the run resumable; ``runtime.server_info`` and ``execution_info``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.checkpoint.memory import InMemoryCheckpointer
from oncegraph.errors import GraphDrained
from oncegraph.runtime import RunControl, Runtime, ServerInfo


class S(TypedDict, total=False):
    first: str
    second: str


def _graph(calls: list[str], control: RunControl | None = None, *, drain_in: str = "") -> Any:
    def first(state: S) -> dict[str, Any]:
        calls.append("first")
        if control is not None and drain_in == "first":
            control.request_drain("sigterm")
        return {"first": "done"}

    def second(state: S) -> dict[str, Any]:
        calls.append("second")
        if control is not None and drain_in == "second":
            control.request_drain("sigterm")
        return {"second": "done"}

    g = StateGraph(S)
    g.add_node("first", first)
    g.add_node("second", second)
    g.add_edge(START, "first")
    g.add_edge("first", "second")
    g.add_edge("second", END)
    return g


def test_a_drain_stops_before_the_next_step_and_the_run_goes_on_after() -> None:
    calls: list[str] = []
    control = RunControl()
    app = _graph(calls, control, drain_in="first").compile(checkpointer=InMemoryCheckpointer())
    cfg = {"configurable": {"thread_id": "t"}}
    with pytest.raises(GraphDrained, match="sigterm") as caught:
        app.invoke({}, cfg, control=control)
    assert caught.value.reason == "sigterm"
    assert calls == ["first"]
    assert app.get_state(cfg).values == {"first": "done"}
    assert app.invoke(None, cfg) == {"first": "done", "second": "done"}
    assert calls == ["first", "second"]  # the finished step is not redone


def test_a_drain_in_the_last_step_ends_the_run_normally() -> None:
    calls: list[str] = []
    control = RunControl()
    app = _graph(calls, control, drain_in="second").compile()
    assert app.invoke({}, control=control) == {"first": "done", "second": "done"}
    assert control.drain_requested and control.drain_reason == "sigterm"


async def test_a_drained_control_runs_nothing_on_every_async_path() -> None:
    for path in ("ainvoke", "astream"):
        calls: list[str] = []
        control = RunControl()
        control.request_drain("pre")
        app = _graph(calls).compile()
        with pytest.raises(GraphDrained, match="pre"):
            if path == "ainvoke":
                await app.ainvoke({}, control=control)
            else:
                _ = [c async for c in app.astream({}, control=control)]
        assert calls == []


def test_a_drain_from_another_thread_while_a_step_runs() -> None:
    started = threading.Event()
    release = threading.Event()
    calls: list[str] = []

    def first(state: S) -> dict[str, Any]:
        started.set()
        release.wait(5)
        calls.append("first")
        return {"first": "done"}

    control = RunControl()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            list(g2.compile().stream({}, control=control))
        except GraphDrained as exc:
            errors.append(exc)

    g2 = StateGraph(S)
    g2.add_node("first", first)
    g2.add_node("second", lambda s: {"second": str(calls.append("second"))})
    g2.add_edge(START, "first")
    g2.add_edge("first", "second")
    t = threading.Thread(target=run)
    t.start()
    assert started.wait(5)
    control.request_drain()
    release.set()
    t.join(10)
    assert calls == ["first"]
    assert [getattr(e, "reason", None) for e in errors] == ["shutdown"]


def test_server_info_and_the_task_namespace_reach_the_node() -> None:
    seen: dict[str, Any] = {}

    def node(state: S, runtime: Runtime) -> dict[str, Any]:
        seen["server"] = runtime.server_info
        seen["info"] = runtime.execution_info
        return {"first": "x"}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    app = g.compile()
    app.invoke({}, {"configurable": {"assistant_id": "a1", "graph_id": "g1"}})
    assert seen["server"] == ServerInfo(assistant_id="a1", graph_id="g1")
    info = seen["info"]
    assert info.checkpoint_ns == f"n:{info.task_id}"
    app.invoke({})
    assert seen["server"] is None


def test_runtime_merge_keeps_the_control() -> None:
    control = RunControl()
    assert Runtime(control=control).merge(Runtime()).control is control
    assert Runtime(control=control).drain_requested is False
    control.request_drain("x")
    assert Runtime(control=control).drain_reason == "x"


def test_an_async_node_cancelled_with_the_run_does_not_finish() -> None:
    async def main() -> None:
        started = asyncio.Event()
        finished: list[str] = []

        async def slow(state: S) -> dict[str, Any]:
            started.set()
            await asyncio.sleep(30)
            finished.append("slow")
            return {}

        g = StateGraph(S)
        g.add_node("slow", slow)
        g.add_edge(START, "slow")
        task = asyncio.ensure_future(g.compile().ainvoke({}, control=RunControl()))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == []

    asyncio.run(main())


async def test_a_node_raising_cancelled_error_itself_fails_the_run() -> None:
    from oncegraph.errors import NodeCancelledError

    async def ok(state: S) -> dict[str, Any]:
        return {"first": "ok"}

    async def boom(state: S) -> dict[str, Any]:
        raise asyncio.CancelledError("raised by the node")

    g = StateGraph(S)
    g.add_node("ok", ok)
    g.add_node("boom", boom)
    g.add_edge(START, "ok")
    g.add_edge(START, "boom")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    with pytest.raises(NodeCancelledError) as caught:
        await app.ainvoke({}, {"thread_id": "t"})
    assert caught.value.node == "boom"
    assert app.runs(thread_id="t")[0].status.value == "failed"

"""The sync thread pool: sized, named, and a timed-out call's thread accounted for.

Sync nodes and tools run in oncegraph's own pool (``oncegraph-sync-N`` threads), never
asyncio's default executor (6 threads on a 2-core machine): N concurrent runs of a sync
tool all start with a pool of N. A call still running after its timeout is counted as
stuck (a warning names it, ``app.sync_pool.stats()`` lists it) until its thread ends;
stuck threads do not take new calls' threads, and once a pool's limit of stuck calls is
reached a new sync call is refused before it is made. Blocked calls wait on
events the test sets, so no thread outlives its test.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, ToolNode, add_messages, tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ConfigError,
    NodeTimeoutError,
    SyncThreadsExhaustedError,
    ToolTimeoutError,
)
from oncegraph.runtime.executor import ThreadPool
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import EffectStatus

LONG = 30.0  # how long a blocked call would wait if nobody released it
SHORT = 0.05


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    done: str


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _agent(tools: list[Any], name: str, path: Path, **compile: Any) -> CompiledGraph:
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
    return g.compile(checkpointer=SqliteCheckpointer(path / "runs.db"), **compile)


def _one_node(fn: Any, path: Path) -> CompiledGraph:
    """START -> ``fn`` (a sync node) -> END, on a pool of one thread."""
    g = StateGraph(S)
    g.add_node(fn.__name__, fn)
    g.add_edge(START, fn.__name__)
    g.add_edge(fn.__name__, END)
    return g.compile(checkpointer=SqliteCheckpointer(path / "runs.db"), sync_threads=1)


def test_n_concurrent_runs_of_a_sync_tool_all_start(tmp_path: Path) -> None:
    n = 12  # twice asyncio's default executor on this machine
    inside = 0
    most = 0
    names: set[str] = set()
    lock = threading.Lock()
    all_in = threading.Event()

    @tool(dedup="test double: changes nothing a repeat could double")
    def ship(order: str) -> str:
        """Ship an order."""
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            names.add(threading.current_thread().name)
            if inside == n:
                all_in.set()
        all_in.wait(LONG)  # every call waits until all n are inside at once
        with lock:
            inside -= 1
        return f"shipped {order}"

    app = _agent([ship], "ship", tmp_path, sync_threads=n)

    async def many() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(app.ainvoke({"messages": ["go"]}, {"thread_id": f"t{i}"}) for i in range(n))
        )

    outs = asyncio.run(many())
    assert all_in.is_set() and most == n > 6
    assert [o["done"] for o in outs] == ["shipped o1"] * n
    assert all(name.startswith("oncegraph-sync") for name in names)
    assert app.sync_pool.stats().max_workers == n


def test_a_timed_out_sync_call_is_reported_and_counted_until_it_ends(
    tmp_path: Path, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(dedup="test double: changes nothing a repeat could double")
    def ship(order: str) -> str:
        """Ship an order."""
        release.wait(LONG)
        return "late"

    app = _agent([ship], "ship", tmp_path, sync_threads=2)
    cfg = {"thread_id": "t", "tool_timeout": SHORT, "tool_grace": SHORT}
    with (
        caplog.at_level(logging.WARNING, "oncegraph.executor"),
        pytest.raises(ToolTimeoutError, match="still running"),
    ):
        app.invoke({"messages": ["go"]}, cfg)
    stats = app.sync_pool.stats()
    assert stats.stuck == 1 and "tool 'ship'" in stats.stuck_calls[0]
    assert any(
        "tool 'ship'" in r.getMessage() and "stuck" in r.getMessage() for r in caplog.records
    )
    release.set()
    deadline = time.monotonic() + 60
    while app.sync_pool.stats().stuck or app.effects(thread_id="t")[0].status is (
        EffectStatus.PENDING
    ):
        assert time.monotonic() < deadline, "the stuck call was never accounted as ended"
        time.sleep(0.01)
    assert app.effects(thread_id="t")[0].status is EffectStatus.COMPLETED


def test_a_timed_out_sync_node_is_reported_and_counted_until_it_ends(
    tmp_path: Path, release: threading.Event
) -> None:
    def slow(state: S) -> dict[str, Any]:
        release.wait(LONG)
        return {"done": "late"}

    app = _one_node(slow, tmp_path)
    with pytest.raises(NodeTimeoutError, match="node 'slow'"):
        app.invoke({"messages": ["go"]}, {"thread_id": "t", "node_timeout": SHORT})
    stats = app.sync_pool.stats()
    assert stats.stuck == 1 and stats.stuck_calls == ("node 'slow'",)
    release.set()
    deadline = time.monotonic() + 60
    while app.sync_pool.stats().stuck:
        assert time.monotonic() < deadline, "the stuck node was never accounted as ended"
        time.sleep(0.01)


def test_a_run_cancelled_while_its_sync_node_waits_for_a_thread_skips_the_call(
    tmp_path: Path, release: threading.Event
) -> None:
    calls: list[str] = []

    def node(state: S) -> dict[str, Any]:
        calls.append("called")
        return {"done": "yes"}

    app = _one_node(node, tmp_path)

    async def go() -> None:
        busy = app.sync_pool.submit(lambda: release.wait(LONG))  # the pool's one thread
        run = asyncio.ensure_future(app.ainvoke({"messages": ["go"]}, {"thread_id": "t"}))
        deadline = time.monotonic() + 60
        while not app.sync_pool.stats().queued:  # the node's call waits for the thread
            assert time.monotonic() < deadline and not run.done()
            await asyncio.sleep(0.005)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        release.set()
        await asyncio.wrap_future(busy.to_future())
        await asyncio.sleep(0.05)  # the thread is free: a call still queued would run now

    asyncio.run(go())
    assert calls == []


def test_too_many_stuck_calls_refuse_a_new_one_before_it_is_called(
    tmp_path: Path, release: threading.Event
) -> None:
    calls: list[str] = []

    @tool(dedup="test double: changes nothing a repeat could double")
    def ship(order: str) -> str:
        """Ship an order."""
        calls.append(order)
        release.wait(LONG)
        return "late"

    app = _agent([ship], "ship", tmp_path, sync_threads=1)
    cfg = {"tool_timeout": SHORT, "tool_grace": SHORT}
    with pytest.raises(ToolTimeoutError):
        app.invoke({"messages": ["go"]}, {**cfg, "thread_id": "a"})
    with pytest.raises(SyncThreadsExhaustedError, match=r"tool 'ship'.*sync_threads=N"):
        app.invoke({"messages": ["go"]}, {**cfg, "thread_id": "b"})
    assert calls == ["o1"]  # the second call was never made
    # at most the intent its model turn planned is there, still pending: never sent
    assert all(r.status is EffectStatus.PENDING for r in app.effects(thread_id="b"))
    release.set()


def test_a_stuck_thread_does_not_take_a_new_calls_thread(release: threading.Event) -> None:
    pool = ThreadPool(1, "oncegraph-sync-test")
    stuck = pool.submit(lambda: release.wait(LONG))
    while not pool.busy:
        time.sleep(0.001)
    pool.abandon(stuck, "tool 'hang'")
    assert pool.stats().stuck == 1
    assert pool.submit(lambda: "fresh").result(timeout=LONG) == "fresh"
    release.set()
    stuck.result(timeout=LONG)
    assert pool.stats().stuck == 0


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_sync_threads_must_be_a_positive_int(bad: Any) -> None:
    g = StateGraph(S)
    g.add_node("n", lambda s: {})
    g.add_edge(START, "n")
    with pytest.raises(ConfigError, match="sync_threads must be a positive int"):
        g.compile(sync_threads=bad)


def test_a_waiter_is_settled_by_the_pool_thread_with_the_result_or_the_error() -> None:
    pool = ThreadPool(2, "waiter-test")

    def boom() -> None:
        raise KeyError("k")

    async def go() -> None:
        thread, waiter = pool.start(lambda: threading.current_thread().name)
        assert (await waiter).startswith("waiter-test-")
        assert thread.done()  # the thread's future ends before the waiter wakes
        thread, waiter = pool.start(boom)
        with pytest.raises(KeyError):
            await waiter
        assert isinstance(thread.exception(), KeyError)

    asyncio.run(go())


def test_a_waiter_cancelled_before_its_call_starts_skips_the_call(
    release: threading.Event,
) -> None:
    pool = ThreadPool(1, "cancel-test")
    called: list[str] = []

    async def go() -> None:
        busy, _ = pool.start(lambda: release.wait(LONG))  # the only thread is taken
        thread, waiter = pool.start(lambda: called.append("late"))
        waiter.cancel()
        release.set()
        await asyncio.wrap_future(busy.to_future())
        await asyncio.sleep(SHORT)
        assert thread.cancelled()

    asyncio.run(go())
    assert called == []


def test_a_call_that_ends_after_its_loop_closed_leaves_the_thread_working(
    release: threading.Event,
) -> None:
    pool = ThreadPool(1, "closed-test")
    holder: dict[str, Any] = {}

    async def go() -> None:
        holder["thread"], _ = pool.start(lambda: release.wait(LONG) and "late")

    asyncio.run(go())  # the loop is closed while the call still runs
    release.set()
    assert holder["thread"].result(timeout=LONG) == "late"
    assert pool.submit(lambda: "next").result(timeout=LONG) == "next"


def test_fast_calls_of_many_runs_are_taken_by_the_threads_already_awake() -> None:
    """64 runs calling a trivial sync function: the awake thread takes the calls queued
    behind it instead of one thread being woken per call (each wake-up costs context
    switches and a GIL hand-off)."""
    pool = ThreadPool(64, "fast-test")

    async def one_run() -> None:
        for i in range(20):
            _, waiter = pool.start(functools.partial(int, i))
            assert await waiter == i

    async def go() -> None:
        await asyncio.gather(*(one_run() for _ in range(64)))

    asyncio.run(go())
    assert pool.threads <= 8, f"{pool.threads} threads started for 1,280 trivial calls"
    assert pool.stats().queued == 0 and pool.busy == 0


def test_a_call_queued_behind_slow_calls_gets_a_thread_of_its_own(
    release: threading.Event,
) -> None:
    pool = ThreadPool(4, "slow-test")

    async def go() -> None:
        slow, _ = pool.start(lambda: release.wait(LONG))
        await asyncio.sleep(SHORT)  # the slow call is running
        started = time.monotonic()
        _, waiter = pool.start(lambda: "quick")
        assert await asyncio.wait_for(waiter, LONG) == "quick"
        assert time.monotonic() - started < LONG / 2
        assert not slow.done(), "it did not wait for the slow call to end"
        assert pool.threads == 2

    asyncio.run(go())


def test_a_call_queued_while_every_thread_is_taken_runs_when_one_frees(
    release: threading.Event,
) -> None:
    pool = ThreadPool(1, "capped-test")

    async def go() -> None:
        _, slow_waiter = pool.start(lambda: release.wait(LONG))
        _, waiter = pool.start(lambda: "after")
        await asyncio.sleep(SHORT * 2)  # several nudges: no thread can be had
        assert not waiter.done() and pool.stats().queued == 1
        release.set()
        assert await asyncio.wait_for(waiter, LONG) == "after"
        assert await slow_waiter is True

    asyncio.run(go())


def test_a_loop_closed_with_a_nudge_due_is_not_kept(release: threading.Event) -> None:
    import gc
    import weakref

    pool = ThreadPool(2, "nudge-test")
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def go() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        pool.start(lambda: release.wait(LONG))
        pool.start(lambda: "queued")  # a thread is awake: a nudge is due in 1 ms

    asyncio.run(go())  # ends before the nudge runs
    release.set()  # the awake thread ends its call and takes the queued one
    deadline = time.monotonic() + LONG
    while (pool.stats().queued or pool.busy) and time.monotonic() < deadline:
        time.sleep(SHORT / 10)
    time.sleep(SHORT)  # the thread let go of its last call
    gc.collect()
    assert loops[0]() is None, "the closed loop is not held by the pool"


def test_loops_that_come_and_go_each_get_their_nudges() -> None:
    """A loop closed with a nudge due leaves nothing behind that would keep a later loop
    (which may even be at the same address) from being nudged: a call queued behind a
    slow one on each new loop still gets a thread of its own."""
    pool = ThreadPool(2, "loops-test")
    for _ in range(5):
        release = threading.Event()

        async def go(release: threading.Event = release) -> None:
            pool.start(lambda: release.wait(LONG))
            _, waiter = pool.start(lambda: "quick")  # a nudge wakes the second thread
            assert await asyncio.wait_for(waiter, LONG) == "quick"
            pool.start(lambda: release.wait(LONG))  # the loop closes with a nudge due

        asyncio.run(go())
        release.set()
        deadline = time.monotonic() + LONG
        while (pool.stats().queued or pool.busy) and time.monotonic() < deadline:
            time.sleep(SHORT / 10)

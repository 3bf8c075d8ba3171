"""When a step stops: a graph's ``step_timeout`` cancels what is still running, a
caller that stops reading ``astream_events`` stops the run, and a failing task lets
its siblings finish (none is cancelled in the middle of a call)."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any, TypedDict

import pytest

from oncegraph.errors import ConfigError
from oncegraph.graph import START, StateGraph
from oncegraph.storage.protocols import Checkpointer


class Box(TypedDict, total=False):
    got: str


class Slow:
    """A node that sleeps, and notes whether it was cancelled."""

    def __init__(self, seconds: float, gives: str | None = None) -> None:
        self.seconds, self.gives = seconds, gives
        self.started = self.cancelled = False

    async def __call__(self, state: Box) -> dict[str, Any]:
        self.started = True
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return {} if self.gives is None else {"got": self.gives}


def _pair(first: Any, second: Any, checkpointer: Checkpointer | None = None) -> Any:
    g = StateGraph(Box).add_node("first", first).add_node("second", second)
    g.add_edge(START, "first").add_edge(START, "second")
    return g.compile(checkpointer=checkpointer)


async def test_a_failing_task_lets_its_siblings_finish(checkpointer: Checkpointer) -> None:
    slow = Slow(0.3, gives="slow")

    async def broken(state: Box) -> dict[str, Any]:
        raise ValueError("broken on purpose")

    app = _pair(slow, broken, checkpointer)
    config = {"configurable": {"thread_id": "f"}}
    with pytest.raises(ValueError, match="broken on purpose"):
        await app.ainvoke({}, config)
    assert slow.started and not slow.cancelled
    state = await app.aget_state(config)
    assert state.values == {"got": "slow"}  # its writes are kept
    assert state.next == ("second",)  # a resume runs only the failed one


async def test_step_timeout_cancels_what_still_runs() -> None:
    slow, quick = Slow(5), Slow(0.05, gives="quick")
    app = _pair(slow, quick)
    app.step_timeout = 0.5
    seen: list[Any] = []
    with pytest.raises(TimeoutError, match="step_timeout"):
        async for chunk in app.astream({}):
            seen.append(chunk)
    assert seen == [{"second": {"got": "quick"}}]  # the quick one streamed as it ended
    assert slow.cancelled


def test_step_timeout_must_be_positive() -> None:
    app = _pair(Slow(0), Slow(0))
    app.step_timeout = -1
    with pytest.raises(ConfigError, match="step_timeout"):
        app.invoke({})


async def test_closing_astream_events_stops_the_run() -> None:
    after = Slow(5)

    async def quick(state: Box) -> dict[str, Any]:
        return {"got": "quick"}

    g = StateGraph(Box).add_node("quick", quick).add_node("after", after)
    app = g.add_edge(START, "quick").add_edge("quick", "after").compile()
    async with aclosing(app.astream_events({}, version="v2")) as events:
        async for event in events:
            if event["event"] == "on_chain_stream" and not event["parent_ids"]:  # the graph's
                assert event["data"]["chunk"] == {"quick": {"got": "quick"}}
                await asyncio.sleep(0.2)  # "after" starts meanwhile
                break
    assert not after.started or after.cancelled

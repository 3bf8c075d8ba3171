"""A step that fails or interrupts keeps its finished tasks' writes, and shows them.

``fast`` and ``slow`` run in one step. When ``slow`` fails or interrupts, ``fast``'s
writes are kept (so a resume runs only ``slow``) and shown as LangGraph shows them:
the interrupted call returns the state with them applied, ``get_state`` of the thread
now has them applied, names only ``slow`` in ``next`` and the failed task's error on
its task; the stored checkpoint read by its id is as it was committed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import START, Command, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.storage.protocols import Checkpointer

RunPath = Callable[..., dict[str, Any]]


class Counter(TypedDict):
    value: Annotated[int, operator.add]


def _graph(checkpointer: Checkpointer, calls: list[str], slow: Callable[[Counter], Any]) -> Any:
    def fast(state: Counter) -> dict[str, Any]:
        calls.append("fast")
        return {"value": 2}

    def slow_node(state: Counter) -> Any:
        calls.append("slow")
        return slow(state)

    b = StateGraph(Counter)
    b.add_node("fast", fast)
    b.add_node("slow", slow_node)
    b.add_edge(START, "fast")
    b.add_edge(START, "slow")
    return b.compile(checkpointer=checkpointer)


def test_a_failed_step_shows_its_finished_writes_and_the_error(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []
    broke = [True]

    def slow(state: Counter) -> dict[str, Any]:
        if broke[0]:
            raise ConnectionError("not good")
        return {"value": 3}

    app: CompiledGraph = _graph(checkpointer, calls, slow)
    cfg = {"thread_id": "t"}
    with pytest.raises(ConnectionError):
        run_path(app, {"value": 1}, cfg)
    state = app.get_state(cfg)
    assert state.values == {"value": 3} and state.next == ("slow",)
    fast, slow_task = sorted(state.tasks, key=lambda t: t.name)
    assert fast.result == {"value": 2} and fast.error is None
    assert slow_task.result is None and slow_task.error == "ConnectionError('not good')"
    stored = app.get_state(state.config)  # by its id: the checkpoint as committed
    assert stored.values == {"value": 1} and set(stored.next) == {"fast", "slow"}

    broke[0] = False
    assert run_path(app, None, cfg) == {"value": 6}
    assert sorted(calls) == ["fast", "slow", "slow"]  # fast ran once
    assert all(t.error is None for t in app.get_state(cfg).tasks)


def test_an_interrupted_step_returns_its_finished_writes(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def slow(state: Counter) -> dict[str, Any]:
        return {"value": int(interrupt("how much?"))}

    app: CompiledGraph = _graph(checkpointer, calls, slow)
    cfg = {"thread_id": "t"}
    out = run_path(app, {"value": 1}, cfg)
    assert out["value"] == 3 and out["__interrupt__"][0].value == "how much?"
    assert app.get_state(cfg).values == {"value": 3}
    assert app.get_state(cfg).next == ("slow",)
    assert run_path(app, Command(resume="10"), cfg) == {"value": 13}
    assert sorted(calls) == ["fast", "slow", "slow"]


def test_the_interrupted_step_streams_the_updates_of_the_siblings_that_finished(
    checkpointer: Checkpointer,
) -> None:
    def slow(state: Counter) -> dict[str, Any]:
        return {"value": int(interrupt("how much?"))}

    app: CompiledGraph = _graph(checkpointer, [], slow)
    chunks = list(app.stream({"value": 1}, {"thread_id": "t"}, stream_mode="updates"))
    assert chunks[0] == {"fast": {"value": 2}}
    assert "__interrupt__" in chunks[-1]

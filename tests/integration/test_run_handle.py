"""The run service's one door: ``start`` hands back the run's id before its first step,
``effect`` and ``prune`` are scope-checked, and the app's calls route through it."""

from __future__ import annotations

import asyncio
from typing import TypedDict

import pytest

from oncegraph import Command, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import ForeignRunError, NoRunToResumeError
from oncegraph.runs.launch import Launch
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus


class S(TypedDict, total=False):
    seen: list[str]
    answer: str


def graph(
    checkpointer: Checkpointer, name: str, gate: asyncio.Event | None = None
) -> CompiledGraph:
    async def first(state: S) -> S:
        if gate is not None:
            await gate.wait()  # the step cannot end before the test lets it
        return {"seen": ["first"]}

    def ask(state: S) -> S:
        return {"answer": str(interrupt("approve?"))}

    g = StateGraph(S, name=name)
    g.add_node("first", first)
    g.add_node("ask", ask)
    g.set_entry_point("first")
    g.add_edge("first", "ask")
    return g.compile(checkpointer=checkpointer)


def test_start_returns_the_run_id_before_the_first_step_ends(checkpointer: Checkpointer) -> None:
    async def go() -> None:
        gate = asyncio.Event()
        app = graph(checkpointer, "handles", gate)
        chunks: list[object] = []
        handle = await app.astart(
            {"seen": []}, {"thread_id": "t1"}, launch=Launch("api:ann"), put=chunks.append
        )
        # the run exists, is this one and is running: its first step waits on the gate
        stored = await app.aget_run(handle.run_id)
        assert stored.thread_id == "t1" and stored.status is RunStatus.RUNNING
        assert not handle.task.done() and chunks == []
        gate.set()
        result = await handle.result()
        assert result.run.run_id == handle.run_id and result.interrupts
        assert (await app.aget_run(handle.run_id)).status is RunStatus.INTERRUPTED
        assert {"first": {"seen": ["first"]}} in chunks
        cfg = RunConfig.parse({"thread_id": "t1"})
        with pytest.raises(NoRunToResumeError):  # waiting for an answer: refused at start
            await app.service.start(None, cfg, launch=Launch("api:ann"))
        # the answer through start: the same run goes on, its id known at once
        answered = await app.service.start(Command(resume="yes"), cfg, launch=Launch("api:ann"))
        assert answered.run_id == handle.run_id
        assert (await answered.result()).values["answer"] == "yes"
        assert (await app.aget_run(handle.run_id)).status is RunStatus.COMPLETED

    asyncio.run(go())


def test_a_start_refused_before_the_run_goes_on_raises_and_starts_nothing(
    checkpointer: Checkpointer,
) -> None:
    async def go() -> None:
        app = graph(checkpointer, "refusals")
        with pytest.raises(NoRunToResumeError):  # nothing to continue on a new thread
            await app.astart(None, {"thread_id": "empty"}, launch=Launch("api:ann"))
        assert await app.aruns(thread_id="empty") == []

    asyncio.run(go())


def test_effect_and_prune_refuse_another_apps_thread(checkpointer: Checkpointer) -> None:
    mine, other = graph(checkpointer, "mine"), graph(checkpointer, "other")
    mine.invoke({"seen": []}, {"thread_id": "t-mine"})
    with pytest.raises(ForeignRunError):
        other.prune(thread_id="t-mine")
    assert mine.prune(thread_id="t-mine").threads <= 1

"""A thread runs one run at a time, and a run the thread moved on from never goes on.

On every store (memory, SQLite, PostgreSQL), through the app:

* A run whose step loses the thread's compare-and-swap (another writer committed on the
  thread since its last step) is failed with an error that says so
  (``ThreadMovedOnError``); continuing it is refused, nothing of it runs again, and
  the other writer's head is left as it is. An operator abandons that run by its id and
  the thread takes new input again.
* While a run of a thread is running in a live process, no other run of the thread is
  started: neither a continue of another (queued) run of it, nor new input after an
  operator abandoned a later run (the earlier one is still running).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, UnfinishedRunError
from oncegraph.errors import ThreadMovedOnError
from oncegraph.ids import new_run_id
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import CheckpointRecord, RunStatus, StepCommit


class S(TypedDict, total=False):
    x: int
    hold: bool


def _intrude(store: Checkpointer, thread_id: str) -> str:
    """Commit a checkpoint on ``thread_id`` at its current version, as another writer."""

    async def go() -> str:
        thread = await store.get_thread(thread_id)
        assert thread is not None
        cp = CheckpointRecord(
            checkpoint_id="cp_other",
            thread_id=thread_id,
            run_id="run_other",
            step=99,
            version=thread.version + 1,
            parent_checkpoint_id=thread.head_checkpoint_id,
            values={"x": -1},
            logs={},
            next=(),
        )
        await store.commit(StepCommit(thread_id, thread.version, cp))
        return cp.checkpoint_id

    return asyncio.run(go())


def test_a_run_the_thread_moved_on_from_is_failed_and_never_continued(
    checkpointer: Checkpointer, tmp_path: Path
) -> None:
    intruder: Checkpointer = (
        SqliteCheckpointer(checkpointer.path)
        if isinstance(checkpointer, SqliteCheckpointer)
        else checkpointer
    )
    calls: list[str] = []

    def a(state: S) -> dict[str, Any]:
        calls.append("a")
        if len(calls) == 1:
            _intrude(intruder, "t")  # another writer commits while this step runs
        return {"x": 1}

    def b(state: S) -> dict[str, Any]:
        calls.append("b")
        return {"x": 2}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    try:
        with pytest.raises(ThreadMovedOnError, match="another run of thread 't' committed"):
            app.invoke({"x": 0}, cfg)
        (run,) = app.runs(thread_id="t")
        assert run.status is RunStatus.FAILED and "never goes on" in (run.error or "")
        # continuing it, by the thread or by its id, is refused: nothing runs again
        for again in (cfg, {"thread_id": "t", "run_id": run.run_id}):
            with pytest.raises(ThreadMovedOnError, match="cannot go on"):
                app.invoke(None, again)
        assert calls == ["a"]
        assert app.get_run(run.run_id).status is RunStatus.FAILED
        assert app.get_state(cfg).values["x"] == -1  # the other writer's head, untouched
        # an operator gives up on it by its id; the thread takes new input again
        abandoned = app.abandon({"thread_id": "t", "run_id": run.run_id}, reason="moved on")
        assert abandoned.status is RunStatus.ABANDONED
        assert app.invoke({"x": 10}, cfg)["x"] == 2
    finally:
        if intruder is not checkpointer:
            asyncio.run(intruder.aclose())


def test_no_run_of_a_thread_starts_while_another_is_running(
    checkpointer: Checkpointer,
) -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def work(state: S) -> dict[str, Any]:
        calls.append(state.get("x", 0))
        if state.get("hold"):
            entered.set()
            assert release.wait(15), "the test never let the run go"
        return {"x": state.get("x", 0) + 1, "hold": False}

    g = StateGraph(S)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "busy"}
    outcome: dict[str, Any] = {}

    def first() -> None:
        try:
            outcome["a"] = app.invoke({"x": 100, "hold": True}, cfg)
        except BaseException as exc:  # pragma: no cover - shown by the assert below
            outcome["a"] = exc

    runner = threading.Thread(target=first)
    runner.start()
    try:
        assert entered.wait(30)
        (a,) = app.runs(thread_id="busy")
        assert a.status is RunStatus.RUNNING
        # another run of the thread, queued (as a submit, or an older process, left it)
        queued = dataclasses.replace(
            a, run_id=new_run_id(), status=RunStatus.QUEUED, input={"x": 200}, lease_owner=None
        )
        asyncio.run(_create(checkpointer, queued))
        with pytest.raises(UnfinishedRunError, match="one run at a time"):
            app.invoke(None, {"thread_id": "busy", "run_id": queued.run_id})
        with pytest.raises(UnfinishedRunError, match="one run at a time"):
            app.resume(queued.run_id, actor="ops", reason="go on")
        # an operator abandons the queued run (the thread's latest): new input must still
        # wait for the run that is running
        app.abandon(cfg, reason="not needed")
        with pytest.raises(UnfinishedRunError, match="one run at a time"):
            app.invoke({"x": 300}, cfg)
        assert calls == [100]
        assert app.get_run(queued.run_id).status is RunStatus.ABANDONED
    finally:
        release.set()
        runner.join(30)
    assert outcome["a"] == {"x": 101, "hold": False}
    assert app.invoke({"x": 300}, cfg)["x"] == 301  # once it ended, the thread is free
    assert calls == [100, 300]


async def _create(store: Checkpointer, run: Any) -> None:
    await store.create_run(run)

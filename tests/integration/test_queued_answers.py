"""``submit(Command(resume=answer), config)``: an answer queued for the workers.

A run waits at an approval; the answer is given by a process with no worker in it, and a
worker (on PostgreSQL) goes on from it: the answer is recorded and audited where it was
given, the node sees it, the tool is called once.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.errors import ConfigError, NoRunToResumeError
from oncegraph.storage.records import RunStatus
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.storage.sql.sqlite import SqliteCheckpointer
from oncegraph.worker import Worker

pytestmark = pytest.mark.postgres


class Refund(TypedDict, total=False):
    order: str
    decision: Any
    refunded: list[str]


def build(calls: list[str]) -> StateGraph:
    def ask(state: Refund) -> Refund:
        return {"decision": interrupt({"approve_refund": state["order"]})}

    def refund(state: Refund) -> Refund:
        calls.append(state["order"])
        return {"refunded": [state["order"]] if state["decision"] == "yes" else []}

    g = StateGraph(Refund)
    g.add_node("ask", ask)
    g.add_node("refund", refund)
    g.add_edge(START, "ask")
    g.add_edge("ask", "refund")
    g.add_edge("refund", END)
    return g


@pytest.fixture
def dsn(fresh_dsn: str) -> str:
    return fresh_dsn


async def test_an_answer_queued_here_is_carried_on_by_a_worker(dsn: str) -> None:
    calls: list[str] = []
    store = PgCheckpointer(dsn)
    try:
        app = build(calls).compile(checkpointer=store)
        threads = [f"order-{n}" for n in range(3)]
        for t in threads:
            await app.ainvoke({"order": t}, {"thread_id": t})
        assert {r.status for r in await app.aruns()} == {RunStatus.INTERRUPTED}
        queued = [
            await app.asubmit(Command(resume="yes"), {"thread_id": t, "actor": "alice"})
            for t in threads
        ]
        assert {q.record.status for q in queued} == {RunStatus.QUEUED}
        assert calls == []  # nothing ran here: the answer waits for a worker
        with pytest.raises(NoRunToResumeError, match="no interrupted run"):
            await app.asubmit(Command(resume="again"), {"thread_id": threads[0]})
        worker = Worker(app, concurrency=2, lease_seconds=5, poll_seconds=600)
        serving = asyncio.create_task(worker.run_forever())
        try:
            for q in queued:  # woken by the notice, long before the 600 s poll
                await asyncio.wait_for(q.aresult(60), 60)
        finally:
            worker.stop()
            await serving
        assert sorted(calls) == threads  # once each
        for t, q in zip(threads, queued, strict=True):
            state = await app.aget_state({"thread_id": t})
            assert state.values["refunded"] == [t]
            assert (await q.arun()).status == RunStatus.COMPLETED
            audit = await app.aaudit(run_id=q.run_id)
            answered = [a for a in audit if a.action == "answer"]
            assert [(a.actor, a.details["answer"]) for a in answered] == [("alice", "yes")]
    finally:
        await store.aclose()


async def test_an_answer_is_not_queued_where_no_worker_takes_runs(tmp_path: Any) -> None:
    calls: list[str] = []
    store = SqliteCheckpointer(str(tmp_path / "runs.db"))
    app = build(calls).compile(checkpointer=store)
    await app.ainvoke({"order": "o1"}, {"thread_id": "o1"})
    with pytest.raises(ConfigError, match="no worker takes runs"):
        await app.asubmit(Command(resume="yes"), {"thread_id": "o1"})
    run = (await app.aruns(thread_id="o1"))[0]
    assert run.status == RunStatus.INTERRUPTED  # untouched: it can still be answered here
    assert (await app.ainvoke(Command(resume="yes"), {"thread_id": "o1"}))["refunded"] == ["o1"]
    await store.aclose()

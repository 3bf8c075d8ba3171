"""Answering a waiting run: what is read to give an answer, and answers that race.

An answer is decided under the run's lock from what is read under it; what is read
before the lock only routes the answer. Several callers answering one run at once: one
answer is recorded, audited and seen by the node; every other caller is refused
(another holds the run, or it no longer waits) and writes nothing. The statements one
answer sends are counted on a real database (a count, not a time), so a read that comes
back twice is seen.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.errors import AmbiguousAnswerError, NoRunToResumeError, RunBusyError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus, WriteKind
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.storage.sql.sqlite import SqliteCheckpointer
from oncegraph.testing.statements import counting
from oncegraph.worker import Worker

# Statements per answer, counted once a process has opened its connections (the first
# answer also sets its lock session up and reads the audit chain's key).
#
# PostgreSQL, submit(Command(resume=...)): before the run's lock, the thread's row with
# its latest run (routing) and the head's checkpoint (the version verdict); the lock;
# under it, the run with its thread's row and the head's task writes; then one
# transaction: the answer, the run queued with the workers' notice, the audit chain's
# lock, head and link; the unlock.
PG_SUBMIT = 11
# invoke(Command(resume=...)) of this module's graph: the answer (the reads above, the
# lock, the fence with its audit link, the answer's write) and the step after it, to the
# run's end. (Before the answer's reads were cut: 17, 20 and 22.)
PG_INVOKE = 15
SQLITE_INVOKE = 17


class Refund(TypedDict, total=False):
    order: str
    decision: Any
    second: Any
    refunded: list[str]


def build(calls: list[str]) -> StateGraph:
    def ask(state: Refund) -> Refund:
        return {"decision": interrupt({"approve_refund": state["order"]})}

    def refund(state: Refund) -> Refund:
        calls.append(f"{state['order']}:{state['decision']}")
        return {"refunded": [state["order"]]}

    g = StateGraph(Refund)
    g.add_node("ask", ask)
    g.add_node("refund", refund)
    g.add_edge(START, "ask")
    g.add_edge("ask", "refund")
    g.add_edge("refund", END)
    return g


def two_questions() -> StateGraph:
    def first(state: Refund) -> Refund:
        return {"decision": interrupt("first?")}

    def second(state: Refund) -> Refund:
        return {"second": interrupt("second?")}

    g = StateGraph(Refund)
    g.add_node("first", first)
    g.add_node("second", second)
    g.add_edge(START, "first")
    g.add_edge(START, "second")
    g.add_edge("first", END)
    g.add_edge("second", END)
    return g


async def _asked_at(store: Checkpointer, thread_id: str) -> str:
    """The checkpoint the thread's question stands on (its head while it waits)."""
    thread = await store.get_thread(thread_id)
    assert thread is not None and thread.head_checkpoint_id is not None
    return thread.head_checkpoint_id


async def _answers(app: Any, run_id: str) -> list[Any]:
    return [a.details["answer"] for a in await app.aaudit(run_id=run_id) if a.action == "answer"]


def test_racing_answers_record_one_and_refuse_the_others(checkpointer: Checkpointer) -> None:
    calls: list[str] = []
    app = build(calls).compile(checkpointer=checkpointer)
    cfg = {"thread_id": "order-1"}

    async def main() -> None:
        await app.ainvoke({"order": "o1"}, cfg)
        (run,) = await app.aruns()
        asked = await _asked_at(checkpointer, "order-1")
        got = await asyncio.gather(
            *(app.ainvoke(Command(resume=f"a{i}"), cfg) for i in range(6)),
            return_exceptions=True,
        )
        done = [g for g in got if not isinstance(g, BaseException)]
        refused = [g for g in got if isinstance(g, BaseException)]
        assert len(done) == 1, got
        assert all(isinstance(e, RunBusyError | NoRunToResumeError) for e in refused), refused
        decision = done[0]["decision"]
        assert calls == [f"o1:{decision}"]  # the node saw the one answer recorded
        assert await _answers(app, run.run_id) == [decision]
        writes = await checkpointer.get_task_writes("order-1", asked)
        assert [w.value for w in writes if w.kind == WriteKind.RESUME] == [decision]
        assert (await app.aget_run(run.run_id)).status is RunStatus.COMPLETED

    asyncio.run(main())


def test_one_answer_while_two_questions_are_open_is_refused_with_nothing_written(
    checkpointer: Checkpointer,
) -> None:
    app = two_questions().compile(checkpointer=checkpointer)
    cfg = {"thread_id": "both"}

    async def main() -> None:
        await app.ainvoke({"order": "o"}, cfg)
        (run,) = await app.aruns()
        with pytest.raises(AmbiguousAnswerError, match="Nothing was answered"):
            await app.ainvoke(Command(resume="yes"), cfg)
        assert (await app.aget_run(run.run_id)).status is RunStatus.INTERRUPTED
        assert await _answers(app, run.run_id) == []
        ids = [i.id for i in (await app.aget_state(cfg)).interrupts]
        out = await app.ainvoke(Command(resume=dict(zip(ids, ["one", "two"], strict=True))), cfg)
        assert (out["decision"], out["second"]) == ("one", "two")

    asyncio.run(main())


@pytest.mark.postgres
def test_racing_submitted_answers_queue_one(fresh_dsn: str) -> None:
    calls: list[str] = []

    async def main() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            app = build(calls).compile(checkpointer=store)
            cfg = {"thread_id": "order-1"}
            await app.ainvoke({"order": "o1"}, cfg)
            (run,) = await app.aruns()
            asked = await _asked_at(store, "order-1")
            got = await asyncio.gather(
                *(app.asubmit(Command(resume=f"a{i}"), cfg) for i in range(6)),
                return_exceptions=True,
            )
            queued = [g for g in got if not isinstance(g, BaseException)]
            refused = [g for g in got if isinstance(g, BaseException)]
            assert len(queued) == 1, got
            assert all(isinstance(e, RunBusyError | NoRunToResumeError) for e in refused)
            assert queued[0].record.status is RunStatus.QUEUED
            (answer,) = await _answers(app, run.run_id)
            writes = await store.get_task_writes("order-1", asked)
            assert [w.value for w in writes if w.kind == WriteKind.RESUME] == [answer]
            worker = Worker(app, concurrency=1, lease_seconds=5, poll_seconds=600)
            serving = asyncio.create_task(worker.run_forever())
            try:
                await asyncio.wait_for(queued[0].aresult(60), 60)
            finally:
                worker.stop()
                await serving
            assert calls == [f"o1:{answer}"]
        finally:
            await store.aclose()

    asyncio.run(main())


@pytest.mark.postgres
def test_a_submitted_answer_by_interrupt_ids_writes_every_answer(fresh_dsn: str) -> None:
    async def main() -> None:
        store = PgCheckpointer(fresh_dsn)
        try:
            app = two_questions().compile(checkpointer=store)
            cfg = {"thread_id": "both"}
            await app.ainvoke({"order": "o"}, cfg)
            with pytest.raises(AmbiguousAnswerError, match="Nothing was answered"):
                await app.asubmit(Command(resume="yes"), cfg)
            (run,) = await app.aruns()
            assert run.status is RunStatus.INTERRUPTED
            assert await _answers(app, run.run_id) == []
            ids = [i.id for i in (await app.aget_state(cfg)).interrupts]
            handle = await app.asubmit(
                Command(resume=dict(zip(ids, ["one", "two"], strict=True))), cfg
            )
            worker = Worker(app, concurrency=1, lease_seconds=5, poll_seconds=600)
            serving = asyncio.create_task(worker.run_forever())
            try:
                out = await asyncio.wait_for(handle.aresult(60), 60)
            finally:
                worker.stop()
                await serving
            assert (out["decision"], out["second"]) == ("one", "two")
        finally:
            await store.aclose()

    asyncio.run(main())


async def _counted(app: Any, store: Any, method: str, threads: list[str]) -> list[int]:
    """Statements of ``method(Command(resume=...))`` on each thread, after a first answer
    (the process's connections opened) on ``threads[0]``."""
    counts = []
    for i, thread in enumerate(threads):
        with counting(store) as counted:
            await getattr(app, method)(Command(resume="yes"), {"thread_id": thread})
        if i:
            counts.append(counted.count)
    return counts


async def _pause(store: Any, threads: list[str]) -> None:
    """Runs waiting on ``threads``, paused by a process of their own (the answering one
    starts with nothing read: as after a deploy)."""
    try:
        app = build([]).compile(checkpointer=store)
        for t in threads:
            await app.ainvoke({"order": t}, {"thread_id": t})
    finally:
        await store.aclose()


@pytest.mark.postgres
def test_statements_per_answer_on_postgresql(fresh_dsn: str) -> None:
    threads = [f"t{i}" for i in range(6)]

    async def main() -> None:
        await _pause(PgCheckpointer(fresh_dsn), threads)
        store = PgCheckpointer(fresh_dsn)
        try:
            app = build([]).compile(checkpointer=store)
            submitted = await _counted(app, store, "asubmit", threads[:3])
            invoked = await _counted(app, store, "ainvoke", threads[3:])
            assert max(submitted) <= PG_SUBMIT, submitted
            assert max(invoked) <= PG_INVOKE, invoked
            queued = await app.aruns(status=RunStatus.QUEUED)
            assert {r.thread_id for r in queued} == set(threads[:3])
        finally:
            await store.aclose()

    asyncio.run(main())


def test_statements_per_answered_run_on_sqlite(tmp_path: Any) -> None:
    threads = [f"t{i}" for i in range(3)]
    path = str(tmp_path / "runs.db")

    async def main() -> None:
        await _pause(SqliteCheckpointer(path), threads)
        store = SqliteCheckpointer(path)
        try:
            app = build([]).compile(checkpointer=store)
            invoked = await _counted(app, store, "ainvoke", threads)
            assert max(invoked) <= SQLITE_INVOKE, invoked
            assert {r.status for r in await app.aruns()} == {RunStatus.COMPLETED}
        finally:
            await store.aclose()

    asyncio.run(main())

"""``Command(resume=answer, update={...})``: the answer's update is applied, once.

The update is the caller's write, as a run's input is: kept as a write of the step the
answer is for (written before the answer itself), shown by ``get_state`` at once, read
by the resumed node, and committed with that step's writes. A step that fails or a
process killed after the answer goes on with the update applied exactly once. Keys
the state has no field for are dropped with a warning, as from any update; a ``goto``
naming no node is refused before anything is answered.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath, run_async

from oncegraph import START, Command, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

WORKER = Path(__file__).with_name("_answer_update_worker.py")


class S(TypedDict):
    my_key: Annotated[str, operator.add]


def _two_questions(checkpointer: Checkpointer) -> CompiledGraph:
    def node(s: S) -> dict[str, Any]:
        a = interrupt({"value": 1})
        b = interrupt({"value": 2})
        return {"my_key": a + " " + b}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    return g.compile(checkpointer=checkpointer)


def _answer(app: CompiledGraph, t: dict[str, Any], answer: str, by_id: bool) -> Any:
    if not by_id:
        return answer
    (asked,) = app.get_state(t).interrupts
    return {asked.id: answer}


@pytest.mark.parametrize("by_id", [False, True], ids=["plain", "by_id"])
def test_the_update_is_applied_on_every_path(
    checkpointer: Checkpointer, run_path: RunPath, by_id: bool
) -> None:
    app = _two_questions(checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    run_path(app, {"my_key": "DE"}, t)
    answer = _answer(app, t, "answer 1", by_id)
    first: Command[Any] = Command(resume=answer, update={"my_key": " foofoo "})
    out = run_path(app, first, t)
    assert [i.value for i in out["__interrupt__"]] == [{"value": 2}]
    assert app.get_state(t).values == {"my_key": "DE foofoo "}
    out = run_path(app, Command(resume=_answer(app, t, "answer 2", by_id)), t)
    assert out["my_key"] == "DE foofoo answer 1 answer 2"
    assert app.get_state(t).values == {"my_key": "DE foofoo answer 1 answer 2"}
    assert app.runs(thread_id="t", limit=1)[0].status is RunStatus.COMPLETED


def test_streams_show_the_update_as_langgraph_does(checkpointer: Checkpointer) -> None:
    app = _two_questions(checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    list(app.stream({"my_key": "DE"}, t))
    updates = list(app.stream(Command(resume="answer 1", update={"my_key": " foofoo "}), t))
    assert [list(u) for u in updates] == [["__interrupt__"]]  # the update is no node's event
    values = list(app.stream(Command(resume="answer 2"), t, stream_mode="values"))
    assert values == [{"my_key": "DE foofoo "}, {"my_key": "DE foofoo answer 1 answer 2"}]


def test_the_resumed_node_reads_the_update(checkpointer: Checkpointer) -> None:
    class R(TypedDict, total=False):
        topic: str
        seen: str

    def node(s: R) -> dict[str, Any]:
        answer = interrupt("ok?")
        return {"seen": f"{s['topic']}:{answer}"}

    g = StateGraph(R)
    g.add_node("node", node)
    g.add_edge(START, "node")
    app = g.compile(checkpointer=checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    app.invoke({"topic": "old"}, t)
    out = run_async(app.ainvoke(Command(resume="yes", update={"topic": "new"}), t))
    assert out == {"topic": "new", "seen": "new:yes"}


def test_keys_outside_the_state_are_dropped_with_a_warning(
    checkpointer: Checkpointer, caplog: pytest.LogCaptureFixture
) -> None:
    app = _two_questions(checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "DE"}, t)
    with caplog.at_level(logging.WARNING):
        app.invoke(Command(resume="a", update={"my_key": "+", "nope": 1}), t)
    assert any("'nope'" in r.getMessage() and "update" in r.getMessage() for r in caplog.records)
    assert app.get_state(t).values == {"my_key": "DE+"}
    assert app.invoke(Command(resume="b"), t) == {"my_key": "DE+a b"}


def test_the_answers_audit_says_an_update_came_with_it(checkpointer: Checkpointer) -> None:
    app = _two_questions(checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "DE"}, t)
    app.invoke(Command(resume="a", update={"my_key": "+"}), t)
    app.invoke(Command(resume="b"), t)
    first, second = sorted(
        (a for a in app.audit(thread_id="t") if a.action == "answer"),
        key=lambda a: a.details["answer"],
    )
    assert first.details["answer"] == "a" and first.details["update"]["update"] == {"my_key": "+"}
    assert second.details["answer"] == "b" and "update" not in second.details


def test_a_goto_naming_no_node_answers_nothing(checkpointer: Checkpointer) -> None:
    app = _two_questions(checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "DE"}, t)
    with pytest.raises(ConfigError, match="names no node"):
        app.invoke(Command(resume="a", update={"my_key": "+"}, goto="nowhere"), t)
    assert app.runs(thread_id="t", limit=1)[0].status is RunStatus.INTERRUPTED
    assert app.get_state(t).values == {"my_key": "DE"}
    assert app.invoke(Command(resume="a"), t)["__interrupt__"][0].value == {"value": 2}


def test_a_failed_step_goes_on_with_the_update_applied_once(checkpointer: Checkpointer) -> None:
    failed: list[bool] = []

    def node(s: S) -> dict[str, Any]:
        answer = interrupt("ok?")
        if not failed:
            failed.append(True)
            raise RuntimeError("down once")
        return {"my_key": f"[{answer}]"}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    app = g.compile(checkpointer=checkpointer)
    t = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "DE"}, t)
    with pytest.raises(RuntimeError, match="down once"):
        app.invoke(Command(resume="yes", update={"my_key": "+"}), t)
    assert app.runs(thread_id="t", limit=1)[0].status is RunStatus.FAILED
    assert app.get_state(t).values == {"my_key": "DE+"}
    assert app.invoke(None, t) == {"my_key": "DE+[yes]"}
    assert app.get_state(t).values == {"my_key": "DE+[yes]"}


def _worker(kind: str, where: str, step: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(WORKER), kind, where, step],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_process_killed_after_the_answer_applies_the_update_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The answering process is SIGKILLed inside the resumed node: the answer and its
    update are stored, the step is not. A fresh process continues the run."""
    where = str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("fresh_dsn")
    first = _worker(kind, where, "start")
    assert first.returncode == 0, first.stderr
    killed = _worker(kind, where, "answer")
    assert killed.returncode == -9, killed.stderr
    going_on = _worker(kind, where, "continue")
    assert going_on.returncode == 0, going_on.stderr
    assert going_on.stdout.strip().splitlines()[-1] == "{'my_key': 'DE foofoo '}"
    done = _worker(kind, where, "finish")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "{'my_key': 'DE foofoo answer 1 answer 2'}"


@pytest.mark.postgres
async def test_an_answer_queued_for_the_workers_keeps_its_update(fresh_dsn: str) -> None:
    from oncegraph.storage.sql.postgres import PgCheckpointer
    from oncegraph.worker import Worker

    store = PgCheckpointer(fresh_dsn)
    try:
        app = _two_questions(store)
        t = {"thread_id": "t"}
        await app.ainvoke({"my_key": "DE"}, t)
        queued = await app.asubmit(Command(resume="answer 1", update={"my_key": " foofoo "}), t)
        assert queued.record.status is RunStatus.QUEUED
        assert (await app.aget_state(t)).values == {"my_key": "DE foofoo "}
        worker = Worker(app, concurrency=1, lease_seconds=5, poll_seconds=600)
        serving = asyncio.create_task(worker.run_forever())
        try:
            await asyncio.wait_for(queued.aresult(60), 60)
        finally:
            worker.stop()
            await serving
        assert (await app.aget_state(t)).values == {"my_key": "DE foofoo "}
        out = await app.ainvoke(Command(resume="answer 2"), t)
        assert out == {"my_key": "DE foofoo answer 1 answer 2"}
    finally:
        await store.aclose()

"""``launch=Launch(actor=...)``: a run started for someone carries its actor and a start
record; a continue is the audited Continue; an answer is recorded with the actor; a run
id chosen before the start names the run. On every store and every run path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, FaultPlan, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, _CrashSignal
from oncegraph.ids import new_run_id
from oncegraph.runs import Launch
from oncegraph.runs.launch import started_by
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

PATHS = ("invoke", "ainvoke", "stream", "astream")


def run_async(coro: Any) -> Any:
    """``coro`` on a loop of its own (this module's, not a conftest's: under xdist the
    name ``conftest`` may resolve to another directory's)."""
    return asyncio.run(coro)


class S(TypedDict, total=False):
    n: int
    answer: Any


def _app(checkpointer: Checkpointer | None, *, ask: bool = False) -> CompiledGraph:
    def step(state: S) -> S:
        return {"n": state.get("n", 0) + 1}

    def question(state: S) -> S:
        return {"answer": interrupt("approve?")}

    graph = StateGraph(S)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    if ask:
        graph.add_node("question", question)
        graph.add_edge("step", "question")
        graph.add_edge("question", END)
    else:
        graph.add_edge("step", END)
    return graph.compile(checkpointer=checkpointer)


def _on(path: str) -> Callable[..., dict[str, Any]]:
    """Run ``app`` with ``launch`` on ``path``; the last values."""

    def run(app: CompiledGraph, inp: Any, config: dict[str, Any], launch: Launch) -> Any:
        if path == "invoke":
            return app.invoke(inp, config, launch=launch)
        if path == "ainvoke":
            return run_async(app.ainvoke(inp, config, launch=launch))
        if path == "stream":
            return list(app.stream(inp, config, stream_mode="values", launch=launch))[-1:]

        async def collect() -> list[Any]:
            return [c async for c in app.astream(inp, config, stream_mode="values", launch=launch)]

        return run_async(collect())[-1:]

    return run


def _audit(app: CompiledGraph, run_id: str) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.actor, a.reason) for a in reversed(app.audit(run_id=run_id))]


@pytest.mark.parametrize("path", PATHS)
def test_a_run_started_for_someone_carries_its_actor_and_a_start_record(
    checkpointer: Checkpointer, path: str
) -> None:
    app = _app(checkpointer)
    run = _on(path)
    chosen = new_run_id()
    run(
        app,
        {"n": 1},
        {"thread_id": f"t-{path}"},
        Launch("ana", reason="asked", run_id=chosen, request_key="req-1"),
    )
    (made,) = app.runs(thread_id=f"t-{path}")
    assert made.run_id == chosen and made.status is RunStatus.COMPLETED
    assert started_by(made.config) == "ana"
    (record,) = app.audit(run_id=chosen)
    assert (record.action, record.actor, record.reason) == ("start", "ana", "asked")
    assert record.details == {"launch_reason": "invoke", "request_key": "req-1"}
    # a run id that exists is never taken again
    with pytest.raises(ConfigError, match="exists already"):
        run(app, {"n": 1}, {"thread_id": f"t2-{path}"}, Launch("ana", run_id=chosen))
    # a replay of it was not started by ana
    app.replay(chosen, mode="evidence", reason="look", actor="bob")
    (replayed,) = app.runs(parent_run_id=chosen)
    assert started_by(replayed.config) is None


@pytest.mark.parametrize("path", PATHS)
def test_a_continue_for_someone_is_the_audited_continue(
    checkpointer: Checkpointer, path: str
) -> None:
    app = _app(checkpointer)
    thread = {"thread_id": f"c-{path}"}
    with pytest.raises(_CrashSignal):
        app.invoke({"n": 1}, {**thread, "fault_plan": FaultPlan("before_checkpoint")})
    (crashed,) = app.runs(thread_id=thread["thread_id"])
    assert crashed.status is RunStatus.RUNNING
    _on(path)(app, None, thread, Launch("ana", reason="after the crash"))
    assert app.get_run(crashed.run_id).status is RunStatus.COMPLETED
    assert _audit(app, crashed.run_id) == [("continue", "ana", "after the crash")]
    # nothing left to continue: refused, nothing recorded
    with pytest.raises(Exception, match="unfinished"):
        _on(path)(app, None, thread, Launch("ana"))
    assert len(app.audit(run_id=crashed.run_id)) == 1


@pytest.mark.parametrize("path", PATHS)
def test_an_answer_for_someone_is_recorded_with_its_actor(
    checkpointer: Checkpointer, path: str
) -> None:
    app = _app(checkpointer, ask=True)
    thread = {"thread_id": f"a-{path}"}
    app.invoke({"n": 1}, thread)
    (run,) = app.runs(thread_id=thread["thread_id"])
    assert run.status is RunStatus.INTERRUPTED
    _on(path)(app, Command(resume="yes"), thread, Launch("ana", reason="approved"))
    assert app.get_state(thread).values["answer"] == "yes"
    (record,) = app.audit(run_id=run.run_id)
    assert (record.action, record.actor, record.reason) == ("answer", "ana", "approved")
    assert record.details["answer"] == "yes"


def test_a_launch_needs_an_actor_a_fresh_run_id_and_a_store() -> None:
    with pytest.raises(ConfigError, match="actor"):
        Launch("")
    with pytest.raises(ConfigError, match="new_run_id"):
        Launch("ana", run_id="not-a-run-id")
    with pytest.raises(ConfigError, match="checkpointer"):
        _app(None).invoke({"n": 1}, launch=Launch("ana"))
    with pytest.raises(ConfigError, match="checkpointer"):
        asyncio.run(_app(None).ainvoke({"n": 1}, launch=Launch("ana")))

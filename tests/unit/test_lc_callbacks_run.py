"""``invoke(input, {"callbacks": [handler]})`` reports the graph's run to LangChain's
handlers as one chain run: its input, then the state it returns (a question is no
error), or the error it raised."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langchain_core.tracers import BaseTracer, Run

from oncegraph import START, StateGraph
from oncegraph.hitl import interrupt
from oncegraph.storage.protocols import Checkpointer


class Kept(BaseTracer):
    """A tracer that keeps the root runs it saw end."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


class Ask(TypedDict, total=False):
    city: str
    answer: str


def _app(checkpointer: Checkpointer | None = None) -> Any:
    def ask(state: Ask) -> dict[str, Any]:
        if state["city"] == "fail":
            raise RuntimeError("no such city")
        if state["city"] == "ask":
            return {"answer": interrupt("which one?")}
        return {"answer": "sunny"}

    g = StateGraph(Ask).add_node("ask", ask).add_edge(START, "ask")
    return g.compile(checkpointer=checkpointer)


async def test_a_run_is_one_chain_run_with_its_output() -> None:
    tracer = Kept()
    out = await _app().ainvoke({"city": "Oslo"}, {"callbacks": [tracer], "run_name": "weather"})
    assert out == {"city": "Oslo", "answer": "sunny"}
    (run,) = tracer.roots
    assert run.name == "weather"
    assert run.inputs == {"city": "Oslo"}
    assert run.outputs == out
    assert run.error is None and run.end_time is not None


def test_a_question_is_no_error(checkpointer: Checkpointer) -> None:
    tracer = Kept()
    config = {"configurable": {"thread_id": "q"}, "callbacks": [tracer]}
    out = _app(checkpointer).invoke({"city": "ask"}, config)
    assert "__interrupt__" in out
    (run,) = tracer.roots
    assert run.error is None
    assert run.outputs == {"city": "ask"}  # the state, without the question


def test_a_failing_run_reports_its_error() -> None:
    tracer = Kept()
    with pytest.raises(RuntimeError, match="no such city"):
        _app().invoke({"city": "fail"}, {"callbacks": [tracer]})
    (run,) = tracer.roots
    assert run.error is not None and "no such city" in run.error


def test_without_callbacks_nothing_is_reported() -> None:
    assert _app().invoke({"city": "Oslo"}) == {"city": "Oslo", "answer": "sunny"}


def _tree(run: Run) -> list[Any]:
    """A run and its children, by name, in start order."""
    kids = sorted(run.child_runs, key=lambda r: (r.dotted_order or "", r.start_time))
    return [run.name, [_tree(k) for k in kids]] if kids else [run.name]


def test_a_streamed_run_is_a_tree_of_node_runs(checkpointer: Checkpointer) -> None:
    from langchain_core.runnables import RunnableLambda

    shout = RunnableLambda(lambda text: text.upper(), name="shout")

    def first(state: Ask, config: Any) -> dict[str, Any]:
        return {"answer": shout.invoke(state["city"], config)}  # nested under the node's run

    def second(state: Ask) -> dict[str, Any]:
        return {"answer": state["answer"] + "!"}

    g = StateGraph(Ask).add_node("first", first).add_node("second", second)
    app = g.add_edge(START, "first").add_edge("first", "second").compile(checkpointer=checkpointer)
    tracer = Kept()
    config = {"configurable": {"thread_id": "t"}, "callbacks": [tracer]}
    chunks = list(app.stream({"city": "oslo"}, config))
    assert chunks == [{"first": {"answer": "OSLO"}}, {"second": {"answer": "OSLO!"}}]
    (root,) = tracer.roots
    assert _tree(root) == [root.name, [["first", [["shout"]]], ["second"]]]
    node = next(r for r in root.child_runs if r.name == "first")
    assert node.inputs == {"city": "oslo"} and node.outputs == {"answer": "OSLO"}
    assert node.tags == ["graph:step:1"]
    assert node.extra["metadata"]["langgraph_node"] == "first"
    assert node.extra["metadata"]["thread_id"] == "t"
    assert root.outputs == {"city": "oslo", "answer": "OSLO!"}


def test_a_failing_node_run_reports_its_error() -> None:
    tracer = Kept()
    with pytest.raises(RuntimeError, match="no such city"):
        list(_app().stream({"city": "fail"}, {"callbacks": [tracer]}))
    (root,) = tracer.roots
    (node,) = root.child_runs
    assert node.name == "ask" and "no such city" in (node.error or "")
    assert root.error is not None


def test_an_entrypoint_reports_its_tasks_under_its_node(checkpointer: Checkpointer) -> None:
    from oncegraph import Command
    from oncegraph.func import entrypoint, task

    calls: list[int] = []

    @task()
    def double(n: int) -> int:
        calls.append(n)
        return n * 2

    @entrypoint(checkpointer=checkpointer)
    def flow(n: int) -> int:
        doubled = [double(i).result() for i in range(n)]
        return sum(doubled) + interrupt("add?")

    tracer = Kept()
    config = {"configurable": {"thread_id": "t"}, "callbacks": [tracer]}
    out = list(flow.stream(2, config))
    assert out[:2] == [{"double": 0}, {"double": 2}] and "__interrupt__" in out[2]
    (root,) = tracer.roots
    assert root.name == "LangGraph"  # LangGraph's name for an entrypoint's graph
    (node,) = root.child_runs
    assert node.name == "flow" and node.inputs == {"input": 2}
    assert [(r.name, r.inputs, r.outputs) for r in node.child_runs] == [
        ("double", {"n": 0}, {"output": 0}),
        ("double", {"n": 1}, {"output": 2}),
    ]
    assert [r.tags for r in node.child_runs] == [["seq:step:1"], ["seq:step:1"]]
    assert node.child_runs[0].extra["metadata"]["langgraph_triggers"] == ("__pregel_push",)

    assert flow.invoke(Command(resume=10), config) == 12
    assert calls == [0, 1]  # the resumed node's finished tasks are served, never re-run
    resumed = tracer.roots[-1]
    assert resumed.outputs == {"output": 12}  # the function's own return value
    (node,) = resumed.child_runs
    assert [(r.name, r.outputs) for r in node.child_runs] == [
        ("double", {"output": 0}),
        ("double", {"output": 2}),
    ]


async def test_astream_events_of_an_entrypoint_show_its_node_and_tasks() -> None:
    from oncegraph.func import entrypoint, task

    @task()
    async def double(n: int) -> int:
        return n * 2

    @task()
    async def broken(n: int) -> int:
        raise ValueError("broken")

    @entrypoint()
    async def flow(n: int) -> str:
        await double(n)
        try:
            await broken(n)
        except ValueError:
            pass
        return "done"

    events = [e async for e in flow.astream_events(3, version="v2")]
    seen = [(e["event"], e["name"]) for e in events]
    assert seen[:5] == [
        ("on_chain_start", "LangGraph"),
        ("on_chain_start", "flow"),
        ("on_chain_start", "double"),
        ("on_chain_stream", "double"),
        ("on_chain_end", "double"),
    ]
    assert ("on_chain_start", "broken") in seen and ("on_chain_end", "broken") not in seen
    assert seen[-1] == ("on_chain_end", "LangGraph") and events[-1]["data"] == {"output": "done"}
    by = {(e["event"], e["name"]): e for e in events}
    assert by[("on_chain_end", "flow")]["data"] == {"output": "done", "input": 3}
    assert by[("on_chain_end", "double")]["data"] == {"output": 6, "input": {"n": 3}}
    assert len(by[("on_chain_start", "double")]["parent_ids"]) == 2
    chunks = [e["data"]["chunk"] for e in events if e["event"] == "on_chain_stream"]
    assert {"double": 6} in chunks and {"flow": "done"} in chunks


async def test_a_stream_left_open_reports_nothing_of_later_runs() -> None:
    tracer = Kept()
    app = _app()
    stream = app.astream({"city": "Oslo"}, {"callbacks": [tracer]})
    async for _ in stream:
        break  # left open: the caller's context must not keep the run as a parent
    assert await app.ainvoke({"city": "Paris"}) == {"city": "Paris", "answer": "sunny"}
    await stream.aclose()
    (root,) = tracer.roots  # the open stream's run alone, ended when it was closed
    assert root.inputs == {"city": "Oslo"}
    assert [r.inputs for r in root.child_runs] == [{"city": "Oslo"}]

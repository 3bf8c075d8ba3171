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

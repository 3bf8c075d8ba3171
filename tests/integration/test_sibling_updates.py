"""The ``updates`` of a task of a step of several, as LangGraph streams them.

Such a task's writes are kept as soon as it finishes (so a resume re-runs only its
siblings), and its ``updates`` chunk is streamed then, once: not again when the step
commits or stops. A step resumed after an interrupt (or a failure) streams the
siblings that finished in the earlier attempt first, marked ``{"__metadata__":
{"cached": True}}``, and runs none of them again.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.storage.protocols import Checkpointer


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(checkpointer: Checkpointer, ran: list[str]) -> CompiledGraph:
    def quick(state: State) -> dict[str, Any]:
        ran.append("quick")
        return {"log": ["quick"]}

    def ask(state: State) -> dict[str, Any]:
        ran.append("ask")
        return {"log": [f"ask:{interrupt('go?')}"]}

    b = StateGraph(State)
    b.add_node("quick", quick)
    b.add_node("ask", ask)
    b.add_node("last", lambda s: {"log": ["last"]})
    b.add_edge(START, "quick")
    b.add_edge(START, "ask")
    b.add_edge(["quick", "ask"], "last")
    b.add_edge("last", END)
    return b.compile(checkpointer=checkpointer)


def _chunks(app: CompiledGraph, inp: Any, cfg: dict[str, Any], path: str) -> list[Any]:
    if path == "stream":
        return list(app.stream(inp, cfg, stream_mode="updates"))

    async def collect() -> list[Any]:
        return [c async for c in app.astream(inp, cfg, stream_mode="updates")]

    return asyncio.run(collect())


@pytest.mark.parametrize("path", ["stream", "astream"])
def test_a_finished_sibling_streams_once_and_as_cached_on_resume(
    checkpointer: Checkpointer, path: str
) -> None:
    ran: list[str] = []
    app = _graph(checkpointer, ran)
    cfg = {"configurable": {"thread_id": "t"}}
    first = _chunks(app, {"log": []}, cfg, path)
    assert first[0] == {"quick": {"log": ["quick"]}}
    assert [c for c in first if "quick" in c] == [first[0]]  # once, not again at the stop
    assert "__interrupt__" in first[-1]
    resumed = _chunks(app, Command(resume="yes"), cfg, path)
    assert resumed == [
        {"quick": {"log": ["quick"]}, "__metadata__": {"cached": True}},
        {"ask": {"log": ["ask:yes"]}},
        {"last": {"log": ["last"]}},
    ]
    assert ran == ["quick", "ask", "ask"]  # the finished sibling did not run again
    # the step's writes apply in node-name order (as LangGraph's), not in finishing order
    assert app.get_state(cfg).values["log"] == ["ask:yes", "quick", "last"]

"""``add_node(defer=True)``: a deferred node waits until the run has nothing else left to
run, then runs once with what every branch wrote; the wait is kept in the checkpoint, so
a run paused (or resumed in another process) before it still runs it at the end."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.storage.protocols import Checkpointer


class Docs(TypedDict, total=False):
    docs: Annotated[list[str], operator.add]
    answer: str


def _graph(join: bool) -> StateGraph:
    g = StateGraph(Docs)
    g.add_node("split", lambda s: {})
    g.add_node("short", lambda s: {"docs": ["short"]})
    g.add_node("long_1", lambda s: {"docs": ["long_1"]})
    g.add_node("long_2", lambda s: {"docs": ["long_2"]})
    g.add_node("gather", lambda s: {"answer": ",".join(s["docs"])}, defer=True)
    g.add_edge(START, "split")
    g.add_edge("split", "short")
    g.add_edge("split", "long_1")
    g.add_edge("long_1", "long_2")  # a longer branch, with no edge to gather
    if join:
        g.add_edge(["short", "long_1"], "gather")
    else:
        g.add_edge("short", "gather")
        g.add_edge("long_1", "gather")
    g.add_edge("gather", END)
    return g


@pytest.mark.parametrize("join", [False, True])
def test_a_deferred_node_runs_once_after_every_other_node(join: bool) -> None:
    app = _graph(join).compile()
    steps = [next(iter(c)) for c in app.stream({"docs": []}, stream_mode="updates")]
    assert steps[0] == "split" and set(steps[1:3]) == {"short", "long_1"}  # one step
    assert steps[3:] == ["long_2", "gather"]
    assert app.invoke({"docs": []}) == {
        "docs": ["long_1", "short", "long_2"],
        "answer": "long_1,short,long_2",
    }


def test_the_wait_survives_a_pause_and_a_new_process(checkpointer: Checkpointer) -> None:
    app = _graph(join=False).compile(checkpointer=checkpointer, interrupt_after=["long_2"])
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    app.invoke({"docs": []}, config)
    assert app.get_state(config).next == ("gather",)
    # a fresh app over the same store (a restarted process) goes on to the deferred node
    again = _graph(join=False).compile(checkpointer=checkpointer)
    assert again.invoke(None, config)["answer"] == "long_1,short,long_2"


def test_a_breakpoint_before_the_deferred_node_pauses_when_it_is_next(
    checkpointer: Checkpointer,
) -> None:
    app = _graph(join=True).compile(checkpointer=checkpointer, interrupt_before=["gather"])
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    first = [next(iter(c)) for c in app.stream({"docs": []}, config, stream_mode="updates")]
    assert first[0] == "split" and set(first[1:3]) == {"short", "long_1"}
    assert first[3:] == ["long_2", "__interrupt__"]
    assert app.get_state(config).next == ("gather",)
    assert [c for c in app.stream(None, config, stream_mode="updates")] == [
        {"gather": {"answer": "long_1,short,long_2"}}
    ]


def test_the_drawing_shows_the_deferred_node_after_the_dead_end() -> None:
    drawn = _graph(join=False).compile().get_graph().draw_mermaid(with_styles=False)
    assert "long_2 -.-> gather;" in drawn

"""The ``values`` stream around questions and empty inputs: a question shows in the
values stream with the state the step began with, and an input that writes no field
gives no values chunk of its own."""

from __future__ import annotations

from typing import Any, TypedDict

from oncegraph.graph import START, StateGraph
from oncegraph.hitl import Command, interrupt
from oncegraph.storage.protocols import Checkpointer


class Form(TypedDict, total=False):
    filled: str
    answer: str


def _app(checkpointer: Checkpointer) -> Any:
    def fill(state: Form) -> dict[str, Any]:
        return {"filled": "by the machine"}

    def ask(state: Form) -> dict[str, Any]:
        return {"answer": interrupt("your name?")}

    return (
        StateGraph(Form)
        .add_node("fill", fill)
        .add_node("ask", ask)
        .add_edge(START, "fill")
        .add_edge("fill", "ask")
        .compile(checkpointer=checkpointer)
    )


def test_a_question_shows_in_the_values_stream(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    config = {"configurable": {"thread_id": "q"}}
    chunks = list(app.stream({}, config, stream_mode=["updates", "values"]))
    assert [mode for mode, _ in chunks] == ["updates", "values", "updates", "values"]
    (_, asked), (_, shown) = chunks[2], chunks[3]
    assert [i.value for i in asked["__interrupt__"]] == ["your name?"]
    assert shown == {"filled": "by the machine", "__interrupt__": asked["__interrupt__"]}

    alone = list(app.stream(Command(resume="Ada"), config, stream_mode="values"))
    assert alone == [{"filled": "by the machine"}, {"filled": "by the machine", "answer": "Ada"}]


def test_values_alone_sees_the_question(checkpointer: Checkpointer) -> None:
    app = _app(checkpointer)
    config = {"configurable": {"thread_id": "v"}}
    chunks = list(app.stream({"filled": "by hand"}, config, stream_mode="values"))
    assert chunks[0] == {"filled": "by hand"}  # the input wrote a field: shown
    assert chunks[1] == {"filled": "by the machine"}
    assert chunks[2]["filled"] == "by the machine"
    assert [i.value for i in chunks[2]["__interrupt__"]] == ["your name?"]
    assert len(chunks) == 3


def test_a_root_value_state_streams_the_question_alone(checkpointer: Checkpointer) -> None:
    def ask(state: str) -> str:
        return str(interrupt("more?")) + state

    app = (
        StateGraph(str)
        .add_node("ask", ask)
        .add_edge(START, "ask")
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "r"}}
    chunks = list(app.stream("x", config, stream_mode="values"))
    assert chunks[0] == "x"
    assert list(chunks[1]) == ["__interrupt__"]
    assert chunks[1]["__interrupt__"][0].value == "more?"

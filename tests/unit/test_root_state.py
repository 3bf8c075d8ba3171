"""Root-value state schemas: ``StateGraph(Annotated[list, add])``, ``StateGraph(list[str])``.

The whole state is one value: nodes receive it, return the new value (or, with a
reducer, the update to merge), ``invoke`` takes and returns it, and the stream and
``get_state`` show it, as LangGraph does. Stored like any state (on SQLite here, so it
comes back from a real database).
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest

from oncegraph import END, START, Command, StateGraph
from oncegraph.errors import ConfigError
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.types import interrupt


def _appending() -> StateGraph:
    g = StateGraph(Annotated[list, operator.add])
    g.add_node("a", lambda s: ["a"])
    g.add_node("b", lambda s: [f"b saw {len(s)}"])
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


def test_a_reducer_root_appends_every_return() -> None:
    app = _appending().compile()
    assert app.invoke(["x"]) == ["x", "a", "b saw 2"]


def test_a_plain_root_value_is_replaced_by_each_return() -> None:
    g = StateGraph(list[str])
    g.add_node("upper", lambda s: [w.upper() for w in s])
    g.add_edge(START, "upper")
    assert g.compile().invoke(["a", "b"]) == ["A", "B"]


def test_a_string_root_with_a_reducer() -> None:
    g = StateGraph(Annotated[str, operator.add])
    g.add_sequence([("one", lambda s: "1"), ("two", lambda s: "2")])
    g.add_edge(START, "one")
    assert g.compile().invoke("x") == "x12"


def test_streams_show_the_value_itself() -> None:
    app = _appending().compile()
    assert list(app.stream(["x"])) == [{"a": ["a"]}, {"b": ["b saw 2"]}]
    assert list(app.stream(["x"], stream_mode="values")) == [
        ["x"],
        ["x", "a"],
        ["x", "a", "b saw 2"],
    ]


async def test_the_async_paths_are_the_same() -> None:
    app = _appending().compile()
    assert await app.ainvoke(["x"]) == ["x", "a", "b saw 2"]
    assert [c async for c in app.astream(["x"])] == [{"a": ["a"]}, {"b": ["b saw 2"]}]


def test_routers_see_the_value() -> None:
    g = StateGraph(Annotated[list, operator.add])
    g.add_node("grow", lambda s: [len(s)])
    g.add_edge(START, "grow")
    g.add_conditional_edges("grow", lambda s: "grow" if len(s) < 3 else END)
    assert g.compile().invoke([]) == [0, 1, 2]


def test_stored_state_and_resume_after_an_interrupt(tmp_path: Path) -> None:
    def ask(state: list[Any]) -> list[Any]:
        return [f"answer={interrupt('which?')}"]

    g = StateGraph(Annotated[list, operator.add])
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    app = g.compile(checkpointer=SqliteCheckpointer(str(tmp_path / "runs.db")))
    cfg = {"configurable": {"thread_id": "t"}}
    first = app.invoke(["q"], cfg)  # as LangGraph: a paused root-value run shows its question
    assert list(first) == ["__interrupt__"]
    assert [i.value for i in first["__interrupt__"]] == ["which?"]
    snap = app.get_state(cfg)
    assert snap.values == ["q"]
    assert snap.next == ("ask",)
    assert [i.value for i in snap.interrupts] == ["which?"]
    assert app.invoke(Command(resume="left"), cfg) == ["q", "answer=left"]
    assert app.get_state(cfg).values == ["q", "answer=left"]
    history = [s.values for s in app.get_state_history(cfg)]
    assert history[0] == ["q", "answer=left"]


def test_a_root_subgraph_gets_and_gives_the_value() -> None:
    inner = StateGraph(Annotated[list, operator.add])
    inner.add_node("deep", lambda s: [f"deep saw {s}"])
    inner.add_edge(START, "deep")
    outer = StateGraph(Annotated[list, operator.add])
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    # the subgraph returns its whole value; the parent's reducer appends it
    assert outer.compile().invoke(["x"]) == ["x", "x", "deep saw ['x']"]


def test_a_plain_annotated_class_is_a_schema_of_fields() -> None:
    class Plain:
        info: Annotated[list[str], operator.add]

    g = StateGraph(Plain)
    g.add_node("n", lambda s: {"info": ["n"]})
    g.add_edge(START, "n")
    assert g.compile().invoke({"info": ["x"]}) == {"info": ["x", "n"]}


def test_a_value_that_is_not_a_type_names_the_fix() -> None:
    with pytest.raises(ConfigError, match="value type"):
        StateGraph(42)

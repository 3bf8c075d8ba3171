"""LangGraph's value shapes: ``Interrupt(value=, id=)`` equality and ``StateSnapshot``
as an 8-field named tuple (oncegraph's extra ``run_id`` outside the tuple)."""

from __future__ import annotations

from typing import Any, TypedDict

from oncegraph import START, Command, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.types import Interrupt, StateSnapshot, interrupt


def test_interrupts_are_equal_by_value_and_id_only() -> None:
    ours = Interrupt.of("cp", "ask", 0, "which?")
    assert ours == Interrupt(value="which?", id=ours.id)
    assert ours.node == "ask" and ours.index == 0  # kept, but not compared
    assert ours != Interrupt(value="which?", id="another")
    assert ours != Interrupt(value="other", id=ours.id)
    assert repr(Interrupt(value=1, id="i")) == "Interrupt(value=1, id='i')"
    assert hash(ours) == hash(Interrupt(value="which?", id=ours.id))


def test_a_snapshot_is_langgraphs_eight_field_tuple() -> None:
    assert StateSnapshot._fields == (
        "values",
        "next",
        "config",
        "metadata",
        "created_at",
        "parent_config",
        "tasks",
        "interrupts",
    )
    snap = StateSnapshot({"a": 1}, ("n",), {"c": 1}, {"step": 0}, None, None, (), (), run_id="r1")
    values, next_, config, metadata, created_at, parent, tasks, interrupts = snap
    assert (values, next_, config, metadata) == ({"a": 1}, ("n",), {"c": 1}, {"step": 0})
    assert (created_at, parent, tasks, interrupts) == (None, None, (), ())
    # what LangGraph's code builds compares equal: run_id is not part of the tuple
    assert snap == StateSnapshot({"a": 1}, ("n",), {"c": 1}, {"step": 0}, None, None, (), ())
    assert snap.run_id == "r1"
    assert snap._replace(values={"a": 2}).run_id == "r1"
    assert snap._replace(run_id="r2").run_id == "r2"


class S(TypedDict):
    answer: str


def _ask(state: S) -> dict[str, Any]:
    return {"answer": interrupt("which?")}


def test_get_state_gives_a_snapshot_with_its_run_and_equal_interrupts() -> None:
    g = StateGraph(S)
    g.add_node("ask", _ask)
    g.add_edge(START, "ask")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    cfg = {"configurable": {"thread_id": "t"}}
    out = app.invoke({"answer": ""}, cfg)
    (asked,) = out["__interrupt__"]
    assert asked == Interrupt(value="which?", id=asked.id)
    snap = app.get_state(cfg)
    assert isinstance(snap, tuple) and len(snap) == 8
    assert snap.run_id is not None and snap.run_id.startswith("run_")
    assert snap.interrupts == (Interrupt(value="which?", id=asked.id),)
    assert app.invoke(Command(resume="left"), cfg) == {"answer": "left"}
    assert all(s.run_id == snap.run_id for s in app.get_state_history(cfg))

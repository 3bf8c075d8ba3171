"""Keys outside the state schema are dropped, as LangGraph drops them, with one warning.

A node's update (a dict, a ``Command(update=...)`` in either spelling), the caller's
input and ``update_state`` lose the keys the graph has no field for; the run goes on and
stores only the known fields, on every store. A typo still gets a word: one warning per
node and key, naming the key, the known fields and the fix. As LangGraph passes them on,
the node's routers still read those keys (kept with a finished task's writes, so a resumed
step routes the same). A node return that is not an update at all is still refused.
"""

from __future__ import annotations

import logging
import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, FaultPlan, StateGraph
from oncegraph.app import CompiledGraph
from oncegraph.errors import InvalidUpdateError, _CrashSignal
from oncegraph.storage.protocols import Checkpointer

LOGGER = "oncegraph.state.channels"


class State(TypedDict, total=False):
    count: Annotated[int, operator.add]
    note: str


def _build(store: Checkpointer | None) -> CompiledGraph:
    g = StateGraph(State)
    g.add_node("typo", lambda s: {"count": 1, "nte": "misspelt"})
    g.add_node(
        "cmd",
        lambda s: Command(update={"count": 10, "stray": 1}, goto="pairs"),
    )
    g.add_node("pairs", lambda s: Command(update=[("count", 100), ("other", 2), ("note", "ok")]))
    g.add_edge(START, "typo")
    g.add_edge("typo", "cmd")
    g.add_edge("pairs", END)
    return g.compile(checkpointer=store)


def _dropped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_unknown_keys_of_updates_are_dropped_and_stored_state_has_only_fields(
    checkpointer: Checkpointer, reopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    app = _build(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    out = app.invoke({"count": 0, "junk": "input"}, cfg)
    assert out == {"count": 111, "note": "ok"}
    again = _build(reopen()).get_state(cfg)  # a fresh app reads the stored state back
    assert dict(again.values) == {"count": 111, "note": "ok"}
    assert again.next == ()

    messages = _dropped(caplog)
    assert len(messages) == 4, messages
    typo = next(m for m in messages if "'nte'" in m)
    assert "node 'typo' wrote 'nte'" in typo
    assert "known fields: ['count', 'note']" in typo
    assert "Add 'nte' to the state schema" in typo
    assert any("node 'cmd' wrote 'stray'" in m for m in messages)
    assert any("node 'pairs' wrote 'other'" in m for m in messages)
    assert any("input key 'junk'" in m for m in messages)


def test_one_warning_per_node_and_key_not_per_step(
    checkpointer: Checkpointer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    app = _build(checkpointer)
    for thread in ("a", "b", "c"):
        app.invoke({"count": 0}, {"configurable": {"thread_id": thread}})
    assert sum("'nte'" in m for m in _dropped(caplog)) == 1
    caplog.clear()
    other = _build(checkpointer)  # another graph warns on its own
    other.invoke({"count": 0}, {"configurable": {"thread_id": "d"}})
    assert sum("'nte'" in m for m in _dropped(caplog)) == 1


def test_update_state_drops_unknown_keys(
    checkpointer: Checkpointer, reopen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    app = _build(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"count": 0}, cfg)
    app.update_state(cfg, {"note": "patched", "nope": 1}, as_node="pairs")
    assert dict(_build(reopen()).get_state(cfg).values) == {"count": 111, "note": "patched"}
    assert any("'nope'" in m for m in _dropped(caplog))


def test_an_update_with_only_unknown_keys_writes_nothing_and_the_run_goes_on(
    checkpointer: Checkpointer,
) -> None:
    g = StateGraph(State)
    g.add_node("a", lambda s: {"unknown": 1})
    g.add_node("b", lambda s: {"note": "b ran"})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    assert app.invoke({"count": 1}, cfg) == {"count": 1, "note": "b ran"}
    updates = [c for c in app.stream({"count": 1}, {"configurable": {"thread_id": "u"}})]
    assert updates[0] == {"a": None}  # as LangGraph shows a node that wrote nothing


@pytest.mark.parametrize("bad", [1, "text", [1, 2]])
def test_a_return_that_is_not_an_update_is_still_refused(bad: Any) -> None:
    g = StateGraph(State)
    g.add_node("n", lambda s: bad)
    g.add_edge(START, "n")
    with pytest.raises(InvalidUpdateError, match="node 'n' returned"):
        g.compile().invoke({"count": 0})


def _routed(store: Checkpointer, asynchronous: bool) -> CompiledGraph:
    def pick(data: dict[str, Any]) -> str:
        return "yes" if data.get("hint") == "go" else "no"

    async def apick(data: dict[str, Any]) -> str:
        return pick(data)

    g = StateGraph(State)
    g.add_node("a", lambda s: {"count": 1, "hint": "go"})
    g.add_node("sibling", lambda s: {"count": 10})
    g.add_node("yes", lambda s: {"note": "yes"})
    g.add_node("no", lambda s: {"note": "no"})
    g.add_edge(START, "a")
    g.add_edge(START, "sibling")
    g.add_conditional_edges("a", apick if asynchronous else pick, ["yes", "no"])
    return g.compile(checkpointer=store)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_router_reads_the_keys_its_node_returned_outside_the_state(
    checkpointer: Checkpointer, reopen: Any, asynchronous: bool
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    out = _routed(checkpointer, asynchronous).invoke({"count": 0}, cfg)
    assert out == {"count": 11, "note": "yes"}  # routed by 'hint', which is not stored
    history = list(_routed(reopen(), asynchronous).get_state_history(cfg))
    assert all("hint" not in s.values for s in history)


def test_a_resumed_step_routes_by_the_kept_keys_outside_the_state(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    crash = {**cfg, "fault_plan": FaultPlan("before_checkpoint")}
    with pytest.raises(_CrashSignal):  # both tasks saved their writes, no checkpoint yet
        _routed(checkpointer, False).invoke({"count": 0}, crash)
    out = _routed(reopen(), False).invoke(None, cfg)  # a fresh app: the writes decoded
    assert out == {"count": 11, "note": "yes"}


def test_a_router_typed_with_a_state_class_reads_only_the_state(
    checkpointer: Checkpointer,
) -> None:
    seen: list[dict[str, Any]] = []

    def typed(state: State) -> str:
        seen.append(dict(state))
        return END

    g = StateGraph(State)
    g.add_node("a", lambda s: {"count": 1, "hint": "go"})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", typed)
    g.compile(checkpointer=checkpointer).invoke({"count": 0}, {"configurable": {"thread_id": "t"}})
    assert seen == [{"count": 1}]  # as LangGraph: a router with a schema gets no extra keys

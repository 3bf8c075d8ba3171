"""``update_state`` at a static breakpoint (``interrupt_before`` / ``interrupt_after``),
LangGraph's human-in-the-loop edit:

* on the head of a run stopped at a breakpoint (no question asked, nothing owed), the
  edit is a NEW paused run with lineage that takes the stopped run's place (that one is
  ``abandoned``, with an audit record saying by what); ``invoke(None, config)`` goes on
  from the edited state on every run path, without stopping at the same breakpoint
  again, each node running once;
* a run that asks a question (``interrupt()``) still refuses an edit; nothing is written.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath

from oncegraph import START, StateGraph, interrupt
from oncegraph.errors import UnfinishedRunError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus


class State(TypedDict):
    v: Annotated[list[str], operator.add]


def _graph(checkpointer: Checkpointer, called: list[str], **breakpoints: Any) -> Any:
    def agent(state: State) -> State:
        called.append("agent")
        return {"v": ["agent"]}

    def tools(state: State) -> State:
        called.append("tools")
        return {"v": ["tools"]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", tools)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tools")
    return g.compile(checkpointer=checkpointer, **breakpoints)


@pytest.mark.parametrize(
    "breakpoints", [{"interrupt_before": ["tools"]}, {"interrupt_after": ["agent"]}]
)
def test_an_edit_at_a_breakpoint_goes_on_in_a_new_run(
    checkpointer: Checkpointer, run_path: RunPath, breakpoints: dict[str, Any]
) -> None:
    called: list[str] = []
    app = _graph(checkpointer, called, **breakpoints)
    cfg = {"configurable": {"thread_id": "t"}}
    assert run_path(app, {"v": ["in"]}, cfg) == {"v": ["in", "agent"]}
    (stopped,) = app.runs(thread_id="t")
    assert stopped.status is RunStatus.INTERRUPTED
    head = app.get_state(cfg)

    made = app.update_state(cfg, {"v": ["edit"]})

    edited = app.get_state(made)
    assert edited.values == {"v": ["in", "agent", "edit"]} and edited.next == ("tools",)
    assert edited.parent_config == head.config
    runs = {r.run_id: r for r in app.runs(thread_id="t")}
    assert runs[stopped.run_id].status is RunStatus.ABANDONED
    (edit,) = (r for r in runs.values() if r.run_id != stopped.run_id)
    assert edit.status is RunStatus.PAUSED and edit.launch_reason == "time_travel"
    assert edit.parent_run_id == stopped.run_id
    (superseded,) = (a for a in app.audit(run_id=stopped.run_id) if a.action == "supersede")
    assert superseded.details["at"] == "breakpoint"

    assert run_path(app, None, cfg) == {"v": ["in", "agent", "edit", "tools"]}
    assert called == ["agent", "tools"]
    assert app.runs(thread_id="t")[0].status is RunStatus.COMPLETED


def test_a_question_still_refuses_an_edit(checkpointer: Checkpointer) -> None:
    def ask(state: State) -> State:
        return {"v": [interrupt("ok?")]}

    g = StateGraph(State)
    g.add_node("prep", lambda state: {"v": ["prep"]})
    g.add_node("ask", ask)
    g.add_edge(START, "prep")
    g.add_edge("prep", "ask")
    app = g.compile(checkpointer=checkpointer, interrupt_before=["ask"])
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"v": ["in"]}, cfg)
    app.update_state(cfg, {"v": ["edit"]}, as_node="prep")  # at the breakpoint: allowed
    out = app.invoke(None, cfg)  # now the node asks its question
    assert out["v"] == ["in", "prep", "edit"] and out["__interrupt__"]
    before = [s.config for s in app.get_state_history(cfg)]

    with pytest.raises(UnfinishedRunError, match=r"app\.abandon\(config\)"):
        app.update_state(cfg, {"v": ["again"]})

    assert [s.config for s in app.get_state_history(cfg)] == before
    assert app.runs(thread_id="t")[0].status is RunStatus.INTERRUPTED

"""``update_state`` used as input, LangGraph's way, each update a NEW run with lineage:

* on a thread with no checkpoint, ``update_state(config, values, as_node=<node>)``
  makes its first checkpoint as if the node wrote ``values``; ``invoke(None, config)``
  (on every run path) runs what comes after, and a node before it never runs;
* ``as_node="__input__"`` then ``"__start__"`` and the nodes' updates give the same
  history (values, next, steps) as ``invoke`` did on another thread;
* an update as input never drops an unfinished run: on a thread waiting for an answer it
  is refused and nothing is written.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath

from oncegraph import START, Command, Send, StateGraph, interrupt
from oncegraph.errors import UnfinishedRunError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.types import StateUpdate


class State(TypedDict):
    foo: str


def _graph(checkpointer: Checkpointer, called: list[str], *, ask: bool = False) -> Any:
    def agent(state: State) -> State:
        called.append("agent")
        return {"foo": f"agent:{interrupt('ok?')}" if ask else "agent"}

    def tool(state: State) -> State:
        called.append("tool")
        return {"foo": state["foo"] + "+tool"}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    return g.compile(checkpointer=checkpointer)


def test_an_update_starts_a_new_thread_and_invoke_none_runs_what_follows(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    called: list[str] = []
    app = _graph(checkpointer, called)
    cfg = {"configurable": {"thread_id": "t"}}
    made = app.update_state(cfg, {"foo": "by hand"}, as_node="agent")
    assert made["configurable"]["thread_id"] == "t"
    state = app.get_state(cfg)
    assert state.values == {"foo": "by hand"} and state.next == ("tool",)
    assert state.metadata == {"source": "update", "step": 0, "parents": {}}
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.PAUSED and run.launch_reason == "time_travel"
    assert run.parent_run_id is None and run.parent_checkpoint_id is None
    (audit,) = app.audit(run_id=run.run_id)
    assert audit.action == "update_state" and audit.details["as_node"] == "agent"

    out = run_path(app, None, cfg)
    assert out == {"foo": "by hand+tool"} and called == ["tool"]  # agent never ran
    (after,) = app.runs(thread_id="t")
    assert after.run_id == run.run_id and after.status is RunStatus.COMPLETED


def test_updates_as_input_give_the_history_invoke_gives(checkpointer: Checkpointer) -> None:
    called: list[str] = []
    app = _graph(checkpointer, called)
    invoked = {"configurable": {"thread_id": "invoked"}}
    app.invoke({"foo": "in"}, invoked)
    app.invoke({"foo": "in"}, invoked)
    called.clear()
    by_hand = {"configurable": {"thread_id": "by-hand"}}
    turn = [
        [StateUpdate({"foo": "in"}, "__input__")],
        [StateUpdate({"foo": "in"}, "__start__")],
        [StateUpdate({"foo": "agent"}, "agent")],
        [StateUpdate({"foo": "agent+tool"}, "tool")],
    ]
    app.bulk_update_state(by_hand, turn * 2)
    assert called == []  # nothing ran: every checkpoint is an update

    def shown(cfg: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (s.values, s.next, s.metadata["step"], s.metadata["source"] == "input")
            for s in app.get_state_history(cfg)
        ]

    assert shown(by_hand) == shown(invoked)
    assert len(shown(by_hand)) == 8
    runs = app.runs(thread_id="by-hand")
    assert [r.status for r in runs] == [RunStatus.COMPLETED] * 2  # nothing left to run
    assert runs[0].parent_run_id == runs[1].run_id  # the second turn stands on the first
    assert [r.input for r in runs] == [{"foo": "in"}] * 2


def test_an_update_as_input_never_drops_a_run_waiting_for_an_answer(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _graph(checkpointer, called, ask=True)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"foo": "in"}, cfg)
    before = list(app.get_state_history(cfg))
    with pytest.raises(UnfinishedRunError, match=r"app\.branch"):
        app.update_state(cfg, {"foo": "new turn"}, as_node="__input__")
    assert list(app.get_state_history(cfg)) == before
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.INTERRUPTED


class Fan(TypedDict):
    foo: str
    tasks: Annotated[list[int], operator.add]


def test_a_superstep_of_updates_is_one_step_and_a_command_routes_its_sends(
    checkpointer: Checkpointer,
) -> None:
    ran: list[int] = []

    def mapper(state: Fan) -> Command:
        return Command(goto=[Send("task", {"index": i}) for i in range(2)], update={"foo": "map"})

    def task(arg: dict[str, Any]) -> dict[str, Any]:
        ran.append(arg["index"])
        return {"tasks": [arg["index"] * 10]}

    g = StateGraph(Fan)
    g.add_node("map", mapper)
    g.add_node("task", task)
    g.add_edge(START, "map")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    sends = Command(goto=[Send("task", {"index": i}) for i in range(2)], update={"foo": "map"})
    app.bulk_update_state(
        cfg,
        [
            [StateUpdate({"foo": "in"}, "__input__")],
            [StateUpdate(sends, "map")],
        ],
    )
    state = app.get_state(cfg)
    assert state.next == ("task", "task") and state.values == {"foo": "map", "tasks": []}
    app.bulk_update_state(
        cfg, [[StateUpdate({"tasks": [0]}, "task"), StateUpdate({"tasks": [1]}, "task")]]
    )
    state = app.get_state(cfg)
    assert state.values == {"foo": "map", "tasks": [0, 1]} and state.next == ()
    assert len(list(app.get_state_history(cfg))) == 4  # input entry, input, map, tasks
    assert ran == []  # every step written by hand

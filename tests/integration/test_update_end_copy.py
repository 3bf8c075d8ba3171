"""``update_state`` as ``__end__`` and ``__copy__`` with updates, LangGraph's way, each a
NEW run with lineage:

* ``update_state(config, None, as_node="__end__")`` on the head of a run waiting for an
  answer ends that run (``abandoned``, with an audit record naming the actor) and makes a
  checkpoint with the same state and nothing left to run under a new ``completed`` run;
  ``invoke(None, config)`` then runs nothing, new input starts the next turn;
* with values, or on a past checkpoint while a run still waits, it is refused and
  nothing is written;
* ``update_state(config, [StateUpdate(values, node), ...], as_node="__copy__")`` copies
  the checkpoint (a sibling, ``source="fork"``) and writes the updates as one step on
  the copy, each as that node's task there; on a run's input entry with ``__start__``
  it gives the run's input anew, on the state before it.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath

from oncegraph import END, START, Command, Send, StateGraph, interrupt
from oncegraph.errors import ConfigError, UnfinishedRunError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.types import StateUpdate


class State(TypedDict):
    my_key: Annotated[str, operator.add]
    market: str


def _asking(checkpointer: Checkpointer, called: list[str]) -> Any:
    def ask(state: State) -> dict[str, Any]:
        called.append("ask")
        answer = interrupt("why?") if state["market"] == "DE" else " fine"
        return {"my_key": answer}

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    return g.compile(checkpointer=checkpointer)


def test_end_on_a_waiting_run_ends_it_and_leaves_nothing_to_run(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    called: list[str] = []
    app = _asking(checkpointer, called)
    cfg = {"configurable": {"thread_id": "t"}}
    out = app.invoke({"my_key": "v", "market": "DE"}, cfg)
    assert "__interrupt__" in out
    (waiting,) = app.runs(thread_id="t")
    asked = app.get_state(cfg)

    made = app.update_state(cfg, None, as_node=END)

    state = app.get_state(cfg)
    assert state.values == {"my_key": "v", "market": "DE"}
    assert state.next == () and state.tasks == () and state.interrupts == ()
    assert state.metadata == {"source": "update", "step": 1, "parents": {}}
    assert state.parent_config == asked.config
    assert made["configurable"]["checkpoint_id"] == state.config["configurable"]["checkpoint_id"]
    runs = {r.run_id: r for r in app.runs(thread_id="t")}
    assert runs[waiting.run_id].status is RunStatus.ABANDONED
    (ended,) = (r for r in runs.values() if r.run_id != waiting.run_id)
    assert ended.status is RunStatus.COMPLETED and ended.launch_reason == "time_travel"
    assert ended.parent_run_id == waiting.run_id
    assert ended.parent_checkpoint_id == asked.config["configurable"]["checkpoint_id"]
    (end_audit,) = (a for a in app.audit(run_id=waiting.run_id) if a.action == "end")
    assert end_audit.actor == "update_state" and end_audit.details["as_node"] == END
    (update_audit,) = app.audit(run_id=ended.run_id)
    assert update_audit.action == "update_state" and update_audit.details["as_node"] == END

    assert run_path(app, None, cfg) == {"my_key": "v", "market": "DE"}
    assert called == ["ask"]  # nothing ran again
    assert run_path(app, {"my_key": " next", "market": "US"}, cfg) == {
        "my_key": "v next fine",
        "market": "US",
    }


def test_end_with_values_or_behind_a_waiting_run_is_refused(checkpointer: Checkpointer) -> None:
    app = _asking(checkpointer, [])
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "v", "market": "US"}, cfg)
    first = list(app.get_state_history(cfg))[-1].config  # the first run's input entry
    app.invoke({"my_key": " w", "market": "DE"}, cfg)
    head = app.get_state(cfg)
    before = [s.config for s in app.get_state_history(cfg)]

    with pytest.raises(ConfigError, match="takes no values"):
        app.update_state(cfg, {"my_key": "x"}, as_node=END)
    with pytest.raises(UnfinishedRunError, match=r"app\.branch"):
        app.update_state(first, None, as_node=END)  # the waiting run is not the head's

    assert [s.config for s in app.get_state_history(cfg)] == before
    assert app.get_state(cfg).interrupts == head.interrupts
    assert app.runs(thread_id="t")[0].status is RunStatus.INTERRUPTED


def test_end_on_a_finished_thread_ends_at_a_past_checkpoint(checkpointer: Checkpointer) -> None:
    called: list[str] = []
    app = _asking(checkpointer, called)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "v", "market": "US"}, cfg)
    loop_first = list(app.get_state_history(cfg))[1]  # the input applied, "ask" next
    assert loop_first.next == ("ask",)

    app.update_state(loop_first.config, None, as_node=END)

    state = app.get_state(cfg)
    assert state.values == {"my_key": "v", "market": "US"} and state.next == ()
    assert state.parent_config == loop_first.config
    assert app.invoke(None, cfg) == {"my_key": "v", "market": "US"}
    assert called == ["ask"]


def test_end_keeps_what_a_finished_sibling_wrote(checkpointer: Checkpointer) -> None:
    def one(state: State) -> dict[str, Any]:
        return {"my_key": " one"}

    def ask(state: State) -> dict[str, Any]:
        return {"my_key": interrupt("why?")}

    def start(state: State) -> list[Any]:
        return ["ask", Send("one", state)]

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_node("one", one)
    g.add_conditional_edges(START, start)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"my_key": "v", "market": "DE"}, cfg)
    asked = app.get_state(cfg)
    assert asked.values == {"my_key": "v one", "market": "DE"}
    # LangGraph's order: the Send task first, then the pulled node
    assert [(t.name, t.result) for t in asked.tasks] == [("one", {"my_key": " one"}), ("ask", None)]
    assert asked.next == ("ask",)

    app.update_state(cfg, None, as_node=END)

    state = app.get_state(cfg)
    assert state.values == {"my_key": "v one", "market": "DE"} and state.next == ()
    past = app.get_state(asked.config)
    assert [(t.name, t.result) for t in past.tasks] == [("one", {"my_key": " one"}), ("ask", None)]


class Named(TypedDict):
    name: Annotated[str, lambda a, b: f"{a} > {b}" if a else b]


def _chain(checkpointer: Checkpointer, called: list[str]) -> Any:
    def one(state: Named) -> Command[Any]:
        called.append("one")
        return Command(goto=[Send("two", {})], update={"name": "one"})

    def two(state: Named) -> Named:
        called.append("two")
        return {"name": "two"}

    def three(state: Named) -> Named:
        called.append("three")
        return {"name": "three"}

    g = StateGraph(Named)
    g.add_node("one", one)
    g.add_node("two", two)
    g.add_node("three", three)
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", "three")
    return g.compile(checkpointer=checkpointer)


def _tasks(snap: Any) -> list[tuple[str, Any]]:
    return [(t.name, t.result) for t in snap.tasks]


def test_copy_with_updates_writes_them_as_one_step_on_a_sibling(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    called: list[str] = []
    app = _chain(checkpointer, called)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"name": "start"}, cfg)
    old = list(app.get_state_history(cfg))
    at_two = old[2]  # "start > one", two tasks of "two" next (pulled, and the Send)
    assert at_two.values == {"name": "start > one"} and at_two.next == ("two", "two")
    called.clear()

    made = app.update_state(
        at_two.config,
        [StateUpdate({"name": "2a"}, "two"), StateUpdate({"name": "2b"}, "two")],
        as_node="__copy__",
    )

    edited = app.get_state(made)
    assert edited.values == {"name": "start > one > 2a > 2b"} and edited.next == ("three",)
    assert edited.metadata["source"] == "update"
    copy = app.get_state(edited.parent_config)
    assert copy.metadata["source"] == "fork" and copy.values == at_two.values
    assert copy.parent_config == at_two.parent_config  # a sibling of the checkpoint
    assert _tasks(copy) == [("two", {"name": "2a"}), ("two", {"name": "2b"})]
    (run,) = (r for r in app.runs(thread_id="t") if r.status is RunStatus.PAUSED)
    assert run.launch_reason == "time_travel" and run.parent_checkpoint_id is not None

    assert run_path(app, None, cfg) == {"name": "start > one > 2a > 2b > three"}
    assert called == ["three"]
    history = list(app.get_state_history(cfg))
    assert len(history) == len(old) + 3  # the copy, the edit, the step after it
    assert _tasks(app.get_state(at_two.config)) == [
        ("two", {"name": "two"}),
        ("two", {"name": "two"}),
    ]  # the first branch as it was


def test_copy_of_an_input_entry_gives_the_run_its_input_anew(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    called: list[str] = []
    app = _chain(checkpointer, called)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"name": "start"}, cfg)
    old = list(app.get_state_history(cfg))
    entry = old[-1]  # the input entry: "" before the input, __start__ next
    assert entry.next == (START,) and entry.parent_config is None
    called.clear()

    made = app.update_state(
        entry.config, [StateUpdate({"name": "again"}, START)], as_node="__copy__"
    )

    new_input = app.get_state(made)
    assert new_input.values == {"name": "again"} and new_input.next == ("one",)
    assert run_path(app, None, cfg) == {"name": "again > one > two > two > three"}
    assert called == ["one", "two", "two", "three"]
    history = list(app.get_state_history(cfg))
    roots = [s for s in history if s.parent_config is None]
    assert [s.values for s in roots] == [{"name": ""}, {"name": ""}]  # two branches
    assert [_tasks(s) for s in roots] == [
        [(START, {"name": "again"})],
        [(START, {"name": "start"})],
    ]
    assert app.get_state(old[0].config).values == old[0].values  # the first branch kept


def test_copy_with_bad_updates_is_refused(checkpointer: Checkpointer) -> None:
    app = _chain(checkpointer, [])
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"name": "start"}, cfg)
    before = [s.config for s in app.get_state_history(cfg)]
    with pytest.raises(ConfigError, match="StateUpdate"):
        app.update_state(cfg, {"name": "x"}, as_node="__copy__")
    assert [s.config for s in app.get_state_history(cfg)] == before

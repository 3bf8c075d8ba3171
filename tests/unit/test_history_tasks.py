"""What a past checkpoint's tasks show in the history: the question a task asked stays
on its task after it was answered, a fork of that checkpoint asks it again (the kept
answer is never reused), and a task's path is spelled as LangGraph spells it."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from oncegraph.constants import PULL, PUSH
from oncegraph.graph import START, StateGraph
from oncegraph.storage.protocols import Checkpointer
from oncegraph.types import Command, Send, interrupt


class State(TypedDict):
    value: Annotated[list[str], operator.add]


def _asking_graph(checkpointer: Checkpointer, called: list[str]) -> Any:
    def first(state: State) -> dict[str, Any]:
        called.append("first")
        return {"value": ["a"]}

    def ask(state: State) -> dict[str, Any]:
        called.append("ask")
        return {"value": [f"human:{interrupt('your input?')}"]}

    def last(state: State) -> dict[str, Any]:
        called.append("last")
        return {"value": ["b"]}

    return (
        StateGraph(State)
        .add_node("first", first)
        .add_node("ask", ask)
        .add_node("last", last)
        .add_edge(START, "first")
        .add_edge("first", "ask")
        .add_edge("ask", "last")
        .compile(checkpointer=checkpointer)
    )


def test_an_answered_question_stays_on_its_task_in_the_history(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _asking_graph(checkpointer, called)
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"value": []}, config)
    asked = app.get_state(config).tasks[0].interrupts
    assert [i.value for i in asked] == ["your input?"]

    assert app.invoke(Command(resume="hello"), config)["value"] == ["a", "human:hello", "b"]

    history = list(app.get_state_history(config))
    (past,) = [s for s in history if s.next == ("ask",)]
    assert past.tasks[0].interrupts == asked  # the same question, the same id
    assert past.interrupts == ()  # nothing waits: it was answered
    assert app.get_state(config).interrupts == ()
    assert [s for s in history if s.next != ("ask",) and any(t.interrupts for t in s.tasks)] == []


def test_a_fork_of_the_asking_checkpoint_asks_again(checkpointer: Checkpointer) -> None:
    called: list[str] = []
    app = _asking_graph(checkpointer, called)
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"value": []}, config)
    app.invoke(Command(resume="hello"), config)
    past = next(s for s in app.get_state_history(config) if s.next == ("ask",))

    called.clear()
    fork = app.update_state(past.config, {"value": ["forked"]})
    out = app.invoke(None, fork)
    assert [i.value for i in out["__interrupt__"]] == ["your input?"]  # not answered "hello"
    assert called == ["ask"]

    final = app.invoke(Command(resume="other"), fork)
    assert final["value"] == ["a", "forked", "human:other", "b"]
    # the original branch's question and answer are as they were
    again = next(s for s in app.get_state_history(config) if s.config == past.config)
    assert again.tasks[0].interrupts == past.tasks[0].interrupts


def test_task_paths_are_langgraphs(checkpointer: Checkpointer) -> None:
    seen: list[Any] = []

    def fan(state: State) -> Command[Any]:
        return Command(goto=[Send("leaf", {"value": ["x"]}), Send("leaf", {"value": ["y"]})])

    def leaf(state: State, config: Any) -> dict[str, Any]:
        seen.append(config["metadata"]["langgraph_path"])
        return {"value": state["value"]}

    app = (
        StateGraph(State)
        .add_node("fan", fan)
        .add_node("leaf", leaf)
        .add_edge(START, "fan")
        .compile(checkpointer=checkpointer, interrupt_before=["leaf"])
    )
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"value": []}, config)
    tasks = app.get_state(config).tasks
    assert [t.path for t in tasks] == [(PUSH, 0, False), (PUSH, 1, False)]
    assert (PULL, PUSH) == ("__pregel_pull", "__pregel_push")

    app.invoke(None, config)
    assert sorted(seen) == [(PUSH, 0, False), (PUSH, 1, False)]
    first = list(app.get_state_history(config))[-2]  # the input applied: fan is next
    assert [t.path for t in first.tasks] == [(PULL, "fan")]


def test_a_subgraphs_snapshot_maps_the_checkpoints_above_it(
    checkpointer: Checkpointer,
) -> None:
    def ask(state: State) -> dict[str, Any]:
        return {"value": [f"a:{interrupt('Q?')}"]}

    inner = StateGraph(State).add_node("ask", ask).add_edge(START, "ask")
    app = (
        StateGraph(State)
        .add_node("executor", inner.compile(checkpointer=True))
        .add_edge(START, "executor")
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"value": []}, config)
    outer = app.get_state(config, subgraphs=True)
    sub = outer.tasks[0].state
    parent_id = outer.config["configurable"]["checkpoint_id"]
    sub_id = sub.config["configurable"]["checkpoint_id"]
    assert sub.config["configurable"]["checkpoint_map"] == {"": parent_id, "executor": sub_id}
    assert sub.metadata["parents"] == {"": parent_id}
    assert outer.metadata["parents"] == {}
    assert "checkpoint_map" not in outer.config["configurable"]

    # the subgraph's config, map and all, answers the question
    assert app.invoke(Command(resume="yes"), sub.config)["value"] == ["a:yes"]

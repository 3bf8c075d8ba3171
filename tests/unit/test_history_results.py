"""A past step's task results in the history: each task of a checkpoint the run went on
from shows what it wrote (``tasks[i].result``), after the step's own task writes are gone.
The step's checkpoint keeps them, message lists left out (their entries are stored once,
in the thread's log). Also: a new thread's input with a ``checkpoint_id`` starts it."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, Send, StateGraph, add_messages
from oncegraph.errors import RunNotFoundError
from oncegraph.storage.protocols import Checkpointer


def _joined(a: str, b: str) -> str:
    return f"{a} > {b}" if a else b


class Named(TypedDict):
    name: Annotated[str, _joined]


def _named_graph(checkpointer: Checkpointer) -> Any:
    def one(state: Named) -> Command:
        return Command(goto=[Send("two", {})], update={"name": "one"})

    def two(state: Named) -> dict[str, Any]:
        return {"name": "two"}

    def three(state: Named) -> dict[str, Any]:
        return {"name": "three"}

    return (
        StateGraph(Named)
        .add_node("one", one)
        .add_node("two", two)
        .add_node("three", three)
        .add_edge(START, "one")
        .add_edge("one", "two")
        .add_edge("two", "three")
        .compile(checkpointer=checkpointer)
    )


def _tasks(history: list[Any]) -> list[tuple[Any, list[tuple[str, Any]]]]:
    return [(s.values, [(t.name, t.result) for t in s.tasks]) for s in history]


def test_each_past_task_shows_what_it_wrote_a_send_and_a_command_too(
    checkpointer: Checkpointer,
) -> None:
    app = _named_graph(checkpointer)
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"name": "start"}, config)
    history = list(app.get_state_history(config))
    assert all(app.get_state(s.config) == s for s in history)  # read by its id: the same
    assert _tasks(history) == [
        ({"name": "start > one > two > two > three"}, []),
        ({"name": "start > one > two > two"}, [("three", {"name": "three"})]),
        ({"name": "start > one"}, [("two", {"name": "two"}), ("two", {"name": "two"})]),
        ({"name": "start"}, [("one", {"name": "one"})]),
        ({"name": ""}, [("__start__", {"name": "start"})]),
    ]


def test_a_root_value_state_shows_the_value_a_task_wrote(checkpointer: Checkpointer) -> None:
    g = StateGraph(Annotated[int, operator.add])
    g.add_node("add_one", lambda _: 1)
    g.add_edge(START, "add_one")
    g.add_conditional_edges("add_one", lambda n: "add_one" if n < 3 else END)
    app = g.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "root"}}
    assert app.invoke(1, config) == 3
    assert _tasks(list(app.get_state_history(config))) == [
        (3, []),
        (2, [("add_one", 1)]),
        (1, [("add_one", 1)]),
        (0, [("__start__", 1)]),
    ]


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]
    turns: int


def test_a_message_list_is_not_stored_again_with_the_results(
    checkpointer: Checkpointer,
) -> None:
    secret = "a long answer " * 20

    def talk(state: Chat) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": secret}], "turns": 1}

    app = (
        StateGraph(Chat)
        .add_node("talk", talk)
        .add_edge(START, "talk")
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "chat"}}
    app.invoke({"messages": [], "turns": 0}, config)
    history = list(app.get_state_history(config))
    (ran,) = [s for s in history if s.next == ("talk",)]
    assert ran.tasks[0].result == {"turns": 1}  # the message is in the state, once
    assert "results" not in ran.metadata  # oncegraph's own metadata stays out of view
    cps = asyncio.run(checkpointer.list_checkpoints("chat"))
    assert all(secret not in str(cp.metadata) for cp in cps)
    # a field only one task wrote, with no reducer, is the checkpoint's own value: named
    assert cps[0].metadata["results"] == {"talk": {"same": ["turns"]}}


def test_an_update_as_the_next_node_shows_as_that_tasks_result(
    checkpointer: Checkpointer,
) -> None:
    app = _named_graph(checkpointer)
    config = {"configurable": {"thread_id": "u"}}
    app.invoke({"name": "start"}, config)
    (before_three,) = [s for s in app.get_state_history(config) if s.next == ("three",)]
    edited = app.update_state(before_three.config, {"name": "3"}, as_node="three")
    assert app.get_state(edited).values == {"name": "start > one > two > two > 3"}
    # the checkpoint it stands on had two children; the run's own step is shown
    again = [s for s in app.get_state_history(config) if s.next == ("three",)]
    assert [t.result for s in again for t in s.tasks] == [{"name": "three"}]


def test_time_travel_keeps_the_results_of_the_step_that_ran_first(
    checkpointer: Checkpointer,
) -> None:
    app = _named_graph(checkpointer)
    config = {"configurable": {"thread_id": "fork"}}
    app.invoke({"name": "start"}, config)
    (past,) = [s for s in app.get_state_history(config) if s.next == ("one",)]
    app.invoke(None, past.config)  # a new run from that checkpoint: one, two, three again
    shown = [s for s in app.get_state_history(config) if s.next == ("one",)]
    assert len(shown) == 2  # the original checkpoint and the fork's copy of it
    assert all(s.tasks[0].result == {"name": "one"} for s in shown)


def test_a_new_threads_input_with_a_checkpoint_id_starts_the_thread(
    checkpointer: Checkpointer,
) -> None:
    app = _named_graph(checkpointer)
    config = {"configurable": {"thread_id": "new", "checkpoint_id": "not-there"}}
    assert app.invoke({"name": "start"}, config) == {"name": "start > one > two > two > three"}
    assert app.get_state({"configurable": {"thread_id": "new"}}).next == ()
    with pytest.raises(RunNotFoundError, match="has none yet"):  # nothing to go on with
        app.invoke(None, {"configurable": {"thread_id": "other", "checkpoint_id": "x"}})
    with pytest.raises(RunNotFoundError, match="no checkpoint 'not-there'"):  # kept: a typo
        app.invoke({"name": "again"}, config)


class Counted(TypedDict):
    num: int
    text: str


def test_bulk_updates_show_as_the_tasks_they_stand_for(checkpointer: Checkpointer) -> None:
    from oncegraph.types import StateUpdate

    app = (
        StateGraph(Counted)
        .add_node("double", lambda s: {"num": s["num"] * 2, "text": s["text"] * 2})
        .add_edge(START, "double")
        .add_edge("double", END)
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "bulk"}}
    app.bulk_update_state(
        config,
        [
            [StateUpdate(values={}, as_node="__input__")],
            [StateUpdate(values={"num": 1, "text": "a"}, as_node="__start__")],
            [StateUpdate(values={"num": 2, "text": "aa"}, as_node="double")],
        ],
    )
    history = list(app.get_state_history(config))
    results = {t.name: t.result for s in history for t in s.tasks if t.result is not None}
    assert results == {"double": {"num": 2, "text": "aa"}, "__start__": {"num": 1, "text": "a"}}
    assert all(app.get_state(s.config) == s for s in history)


def test_a_field_a_task_wrote_twice_shows_each_write(checkpointer: Checkpointer) -> None:
    def one(state: Named) -> Command:
        return Command(update=[("name", "one.0"), ("name", "one.1")])

    def two(state: Named) -> dict[str, Any]:
        return {"name": "two"}

    app = (
        StateGraph(Named)
        .add_node("one", one)
        .add_node("two", two)
        .add_edge(START, "one")
        .add_edge("one", "two")
        .compile(checkpointer=checkpointer)
    )
    cfg = {"configurable": {"thread_id": "t"}}
    assert app.invoke({"name": "in"}, cfg) == {"name": "in > one.0 > one.1 > two"}
    by_next = {s.next: s for s in app.get_state_history(cfg)}
    assert [(t.name, t.result) for t in by_next[("one",)].tasks] == [
        ("one", {"name": {"$writes": ["one.0", "one.1"]}})
    ]
    assert [(t.name, t.result) for t in by_next[("two",)].tasks] == [("two", {"name": "two"})]

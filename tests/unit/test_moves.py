"""Run-level decisions, pure: breakpoints and the recursion limit before a step, the one
order open interrupts are answered in, and whether a step's intents may be planned.

No event loop and no store: checkpoints come from the engine's ``advance``, task writes
are built by hand.
"""

from __future__ import annotations

import dataclasses
import unittest.mock
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.errors import RecursionLimitError
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.decisions import Interrupt
from oncegraph.runtime.engine import BREAKPOINT, Head, TaskResult, advance, empty_head
from oncegraph.runtime.engine import plan_step as plan_of
from oncegraph.runtime.moves import (
    OutOfSteps,
    answer_order,
    intent_planners,
    may_plan_intents,
    next_answer,
    next_move,
    open_interrupts,
)
from oncegraph.storage.records import TaskWrite


class S(TypedDict, total=False):
    x: int


def _node(state: S) -> None:  # never called: nothing here runs a node
    raise AssertionError("a run-level decision must not call nodes")


class _Planning:
    """A node that can tell its calls from the state (as ``ToolNode`` does)."""

    def __call__(self, state: S) -> None:
        raise AssertionError("never called")

    def plan_intents(self, state: Any, **where: Any) -> list[Any]:
        return []


def _spec(**compile_breakpoints: Any) -> GraphSpec:
    g = StateGraph(S)
    g.add_node("a", _node)
    g.add_node("b", _Planning())
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    spec = g.validate()
    return dataclasses.replace(spec, **compile_breakpoints)


def _heads(spec: GraphSpec) -> tuple[Head, Head]:
    """The input checkpoint (next: a) and the one after ``a`` (next: b)."""
    h0, _, _ = advance(
        spec, empty_head(spec, "t1"), "r1", [TaskResult(START, {})], step=-1, source="input"
    )
    h1, _, _ = advance(spec, h0, "r1", [TaskResult("a", {})], step=0, source="loop")
    return h0, h1


def _move(spec: GraphSpec, head: Head, writes: list[TaskWrite], **kw: Any) -> Any:
    plan = plan_of(spec, head, writes)
    kw.setdefault("steps", 1)
    kw.setdefault("recursion_limit", 25)
    return next_move(spec, head.checkpoint, plan, writes, run_id="r1", **kw)


# -- next_move ------------------------------------------------------------------------------


def test_a_step_runs_when_nothing_stops_it() -> None:
    spec = _spec()
    h0, h1 = _heads(spec)
    assert _move(spec, h0, []) is None
    assert _move(spec, h1, [], before=("a",)) is None  # a breakpoint on another node


def test_a_breakpoint_before_a_node_is_the_engines_interrupt_decision() -> None:
    spec = _spec()
    h0, _ = _heads(spec)
    move = _move(spec, h0, [], before=("a",))
    assert move == Interrupt(((BREAKPOINT, {"before": ["a"]}, 0),))
    assert isinstance(move, Interrupt) and move.breakpoint


def test_the_graphs_own_breakpoints_count_as_the_calls_do() -> None:
    spec = _spec(interrupt_after=("a",))
    _, h1 = _heads(spec)
    assert _move(spec, h1, []) == Interrupt(((BREAKPOINT, {"after": ["a"]}, 0),))


def test_a_passed_breakpoint_lets_the_step_run() -> None:
    spec = _spec()
    h0, _ = _heads(spec)
    cp = h0.checkpoint.checkpoint_id
    writes = [
        TaskWrite("t1", cp, BREAKPOINT, "interrupt", 0, {"before": ["a"]}),
        TaskWrite("t1", cp, BREAKPOINT, "resume", 0, None),
    ]
    assert _move(spec, h0, writes, before=("a",)) is None


def test_the_step_after_an_update_stops_at_no_breakpoint() -> None:
    spec = _spec(interrupt_after=("a",), interrupt_before=("b",))
    _, h1 = _heads(spec)
    assert _move(spec, h1, []) == Interrupt(((BREAKPOINT, {"after": ["a"]}, 0),))
    edited, _, _ = advance(spec, h1, "r2", [TaskResult("a", {"x": 1})], step=1, source="update")
    assert edited.checkpoint.next == ("b",)
    assert _move(spec, edited, []) is None  # LangGraph's update is seen by the breakpoints
    assert _move(spec, edited, [], before=("b",)) is None


def test_the_recursion_limit_fails_the_run_naming_the_limit_and_the_fix() -> None:
    spec = _spec()
    h0, _ = _heads(spec)
    assert _move(spec, h0, [], steps=2, recursion_limit=3) is None
    move = _move(spec, h0, [], steps=3, recursion_limit=3)
    assert isinstance(move, OutOfSteps)
    assert isinstance(move.error, RecursionLimitError)
    text = str(move.error)
    assert "run r1 reached recursion_limit=3 after 3 steps" in text
    assert "config['recursion_limit']" in text and "invoke(None, config)" in text


def test_a_breakpoint_is_decided_before_the_recursion_limit() -> None:
    spec = _spec()
    h0, _ = _heads(spec)
    move = _move(spec, h0, [], steps=3, recursion_limit=3, before=("*",))
    assert isinstance(move, Interrupt) and move.breakpoint


# -- the next open interrupt ----------------------------------------------------------------


def _asked(*tasks: str, cp: str = "c1") -> dict[str, TaskWrite]:
    return open_interrupts([TaskWrite("t1", cp, t, "interrupt", 0, f"{t}?") for t in tasks])


def test_open_interrupts_leave_out_answered_and_finished_tasks() -> None:
    writes = [
        TaskWrite("t1", "c1", "a", "interrupt", 0, "a?"),
        TaskWrite("t1", "c1", "a", "resume", 0, "yes"),
        TaskWrite("t1", "c1", "a", "interrupt", 1, "a again?"),
        TaskWrite("t1", "c1", "b", "interrupt", 0, "b?"),
        TaskWrite("t1", "c1", "b", "writes", 0, {"update": {}, "goto": []}),
        TaskWrite("t1", "c1", "c", "interrupt", 0, "c?"),
        TaskWrite("t1", "c1", "c", "resume", 0, "no"),
    ]
    waiting = open_interrupts(writes)
    assert list(waiting) == ["a"] and waiting["a"].idx == 1


def test_answers_go_in_declaration_order_whatever_order_the_questions_were_written() -> None:
    order = {"a": 0, "b": 1, "c": 2}
    waiting = _asked("c", "a", "b")
    assert answer_order(order, waiting) == ["a", "b", "c"]
    assert next_answer(order, waiting) == "a"


def test_send_tasks_follow_their_nodes_place_and_are_numbered_not_spelt() -> None:
    # Sends of a later node never jump ahead of an earlier node's question, and the
    # 10th Send comes after the 2nd (not before it, as "b:10" < "b:2" would have it).
    order = {"a": 0, "b": 1}
    waiting = _asked("b:10", "b:2", "b", "a")
    assert answer_order(order, waiting) == ["a", "b", "b:2", "b:10"]
    assert next_answer(order, _asked("b:10", "b:2")) == "b:2"
    assert next_answer(order, _asked("b:0", "a")) == "a"


def test_the_next_answer_is_the_first_of_the_answer_order_for_every_subset() -> None:
    order = {"x": 0, "a": 1, "b": 2}
    tasks = ["b:1", "a", "x:3", "b", "x", "a:0", "zz"]
    for n in range(1, len(tasks) + 1):
        for start in range(len(tasks)):
            subset = [tasks[(start + i) % len(tasks)] for i in range(n)]
            assert next_answer(order, subset) == answer_order(order, subset)[0]


def test_a_breakpoint_or_a_task_of_no_node_is_answered_first() -> None:
    assert next_answer({"a": 0}, _asked("a", BREAKPOINT)) == BREAKPOINT


# -- planned intents ------------------------------------------------------------------------


def _may(spec: GraphSpec, head: Head, **kw: Any) -> bool:
    args: dict[str, Any] = {"nested": False, "replay": False, "steps": 1, "recursion_limit": 25}
    return may_plan_intents(spec, head.checkpoint, **(args | kw))


def test_intents_are_planned_only_when_the_next_step_surely_runs_now() -> None:
    spec = _spec()
    _, h1 = _heads(spec)
    assert _may(spec, h1)
    assert not _may(spec, h1, nested=True)  # a subgraph's step
    assert not _may(spec, h1, replay=True)  # a replay's effects are decided by its mode
    assert not _may(spec, h1, steps=25)  # the limit stops the run before the step
    assert _may(spec, h1, steps=24)
    assert not _may(spec, h1, before=("a",))  # any breakpoint might stop it
    assert not _may(spec, h1, after=("a",))
    assert not _may(_spec(interrupt_before=("b",)), _heads(_spec(interrupt_before=("b",)))[1])
    done = Head(dataclasses.replace(h1.checkpoint, next=()), h1.values)
    assert not _may(spec, done)  # nothing left to run
    sends = dataclasses.replace(h1.checkpoint, metadata={**h1.checkpoint.metadata, "sends": [{}]})
    assert not _may(spec, Head(sends, h1.values))


def test_only_nodes_that_plan_their_calls_are_asked_once_each() -> None:
    spec = _spec()
    h0, h1 = _heads(spec)
    assert intent_planners(spec, h0.checkpoint) == []  # a: a plain function
    twice = dataclasses.replace(h1.checkpoint, next=("b", "b", "gone"))
    planners = intent_planners(spec, twice)
    assert [name for name, _ in planners] == ["b"]
    assert planners[0][1]({}) == []


def test_a_node_that_makes_up_attributes_plans_nothing() -> None:
    g = StateGraph(S)
    g.add_node("m", unittest.mock.Mock(return_value={}))  # any attribute "exists" on it
    g.add_edge(START, "m")
    spec = g.validate()
    cp = dataclasses.replace(_heads(_spec())[0].checkpoint, next=("m",))
    assert intent_planners(spec, cp) == []


@pytest.mark.parametrize("limit", [1, 2])
def test_the_limit_check_is_the_same_for_the_move_and_the_plan(limit: int) -> None:
    spec = _spec()
    _, h1 = _heads(spec)
    for steps in range(4):
        stops = isinstance(_move(spec, h1, [], steps=steps, recursion_limit=limit), OutOfSteps)
        assert stops == (not _may(spec, h1, steps=steps, recursion_limit=limit))

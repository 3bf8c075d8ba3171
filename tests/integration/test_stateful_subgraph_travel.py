"""Stateful subgraphs (``compile(checkpointer=True)``) under time travel.

When the parent goes back to one of its checkpoints, the subgraph goes back with it: its
first call in that run starts from the state it had when that checkpoint was current
(later calls of the same run from its own head). A config naming one of the subgraph's
own checkpoints (``get_state(subgraphs=True)``) goes back to the parent's step that
called it, and the subgraph goes on from that checkpoint; ``update_state`` on such a
config forks it. Each of these is a new time travel run, and a crash inside it resumes
without going back twice or repeating an effect.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, FaultPlan, StateGraph, effect, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.constants import CONFIG_KEY_NODE_FINISHED
from oncegraph.errors import UnfinishedRunError, _CrashSignal
from oncegraph.storage.protocols import Checkpointer

RunPath = Callable[..., dict[str, Any]]


class Sub(TypedDict):
    value: Annotated[list[str], operator.add]


class Parent(TypedDict):
    results: Annotated[list[str], operator.add]


def _looping(checkpointer: Checkpointer, seen: list[list[str]], sent: list[str] | None = None):
    """``prepare -> sub`` where ``sub`` appends one ``s`` per call (an effect when
    ``sent`` is given) and records the state it saw."""

    def charge(n: int) -> str:
        assert sent is not None
        sent.append(f"s{n}")
        return "s"

    def step(state: Sub) -> dict[str, Any]:
        seen.append(list(state["value"]))
        return {"value": [effect(charge, len(state["value"])) if sent is not None else "s"]}

    sub = StateGraph(Sub).add_node("step", step).add_edge(START, "step")
    b = StateGraph(Parent)
    b.add_node("prepare", lambda s: {"results": ["p"]})
    b.add_node("sub", sub.compile(checkpointer=True))
    b.add_edge(START, "prepare")
    b.add_edge("prepare", "sub")
    return b.compile(checkpointer=checkpointer)


def _before_sub(app: CompiledGraph, cfg: dict[str, Any]) -> dict[str, Any]:
    """The config of the newest parent checkpoint whose next step calls ``sub``."""
    snap = next(s for s in app.get_state_history(cfg) if s.next == ("sub",))
    return snap.config


def test_a_replay_starts_the_subgraph_from_its_state_at_that_checkpoint(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    seen: list[list[str]] = []
    app = _looping(checkpointer, seen)
    cfg = {"thread_id": "t"}
    app.invoke({"results": []}, cfg)
    app.invoke({"results": []}, cfg)
    app.invoke({"results": []}, cfg)
    assert seen == [[], ["s"], ["s", "s"]]
    # back to the checkpoint before the third call: the subgraph had two notes then
    run_path(app, None, _before_sub(app, cfg))
    assert seen[-1] == ["s", "s"]
    # the thread goes on from the replay's head: the subgraph from its own latest state
    app.invoke({"results": []}, cfg)
    assert seen[-1] == ["s", "s", "s"]


def test_a_fork_by_update_state_sees_the_subgraphs_state_of_that_time(
    checkpointer: Checkpointer,
) -> None:
    seen: list[list[str]] = []
    app = _looping(checkpointer, seen)
    cfg = {"thread_id": "t"}
    for _ in range(3):
        app.invoke({"results": []}, cfg)
    first_sub = [s for s in app.get_state_history(cfg) if s.next == ("sub",)][-1]
    fork = app.update_state(first_sub.config, {"results": ["edited"]})
    app.invoke(None, fork)
    assert seen[-1] == []  # before the first call the subgraph had no state yet


def test_a_subgraph_called_twice_in_one_replay_goes_back_only_once(
    checkpointer: Checkpointer,
) -> None:
    seen: list[list[str]] = []

    def step(state: Sub) -> dict[str, Any]:
        seen.append(list(state["value"]))
        return {"value": ["s"]}

    sub = StateGraph(Sub).add_node("step", step).add_edge(START, "step")
    b = StateGraph(Parent)
    b.add_node("prepare", lambda s: {"results": ["p"]})
    b.add_node("sub", sub.compile(checkpointer=True))
    b.add_edge(START, "prepare")
    b.add_edge("prepare", "sub")
    b.add_conditional_edges("sub", lambda s: "prepare" if len(s["results"]) < 2 else END)
    app = b.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    app.invoke({"results": []}, cfg)
    assert seen == [[], ["s"]]
    first = [s for s in app.get_state_history(cfg) if s.next == ("sub",)][-1]
    seen.clear()
    app.invoke(None, first.config)
    # the first call went back to no state; the loop's second call saw the first's note
    assert seen == [[], ["s"]]


def _asking(checkpointer: Checkpointer, called: list[str]) -> CompiledGraph:
    """``router -> sub(step_a -> ask -> step_b) -> post``."""

    def node(name: str, ask: bool = False) -> Callable[[Sub], dict[str, Any]]:
        def run(state: Sub) -> dict[str, Any]:
            called.append(name)
            answer = interrupt("why?") if ask else name
            return {"value": [f"{name}:{answer}"]}

        return run

    sub = StateGraph(Sub)
    sub.add_node("step_a", node("step_a"))
    sub.add_node("ask", node("ask", ask=True))
    sub.add_node("step_b", node("step_b"))
    sub.add_edge(START, "step_a")
    sub.add_edge("step_a", "ask")
    sub.add_edge("ask", "step_b")
    b = StateGraph(Sub)
    b.add_node("router", node("router"))
    b.add_node("sub", sub.compile(checkpointer=True))
    b.add_node("post", node("post"))
    b.add_edge(START, "router")
    b.add_edge("router", "sub")
    b.add_edge("sub", "post")
    return b.compile(checkpointer=checkpointer)


def test_going_back_to_the_subgraphs_own_checkpoint_reruns_only_what_came_after_it(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    called: list[str] = []
    app = _asking(checkpointer, called)
    cfg = {"thread_id": "t"}
    app.invoke({"value": []}, cfg)
    sub_config = app.get_state(cfg, subgraphs=True).tasks[0].state.config
    assert sub_config["configurable"]["checkpoint_ns"] == "sub"
    app.invoke(Command(resume="first"), cfg)
    called.clear()
    out = run_path(app, None, sub_config)
    assert out["__interrupt__"][0].value == "why?"
    assert called == ["ask"]  # router and step_a came before that checkpoint
    out = run_path(app, Command(resume="second"), sub_config)  # answers that new run
    assert called == ["ask", "ask", "step_b", "post"]
    assert "ask:second" in out["value"] and out["value"][-1] == "post:post"
    runs = app.runs(thread_id="t")
    assert sum(1 for r in runs if r.launch_reason == "time_travel") == 1


def test_update_state_on_the_subgraphs_checkpoint_forks_it(checkpointer: Checkpointer) -> None:
    called: list[str] = []
    app = _asking(checkpointer, called)
    cfg = {"thread_id": "t"}
    app.invoke({"value": []}, cfg)
    sub_config = app.get_state(cfg, subgraphs=True).tasks[0].state.config
    app.invoke(Command(resume="first"), cfg)
    fork = app.update_state(sub_config, {"value": ["edited"]})
    assert fork["configurable"]["checkpoint_ns"] == "sub"
    assert fork["configurable"]["checkpoint_id"] != sub_config["configurable"]["checkpoint_id"]
    called.clear()
    out = app.invoke(None, fork)
    assert out["__interrupt__"][0].value == "why?" and called == ["ask"]
    out = app.invoke(Command(resume="again"), fork)
    assert "edited" in out["value"] and "ask:again" in out["value"]


def test_a_crash_inside_the_subgraph_of_a_replay_resumes_without_going_back_twice(
    checkpointer: Checkpointer,
) -> None:
    seen: list[list[str]] = []
    sent: list[str] = []
    app = _looping(checkpointer, seen, sent)
    cfg = {"thread_id": "t"}
    app.invoke({"results": []}, cfg)
    app.invoke({"results": []}, cfg)
    assert sent == ["s0", "s1"]
    back = _before_sub(app, cfg)
    # the subgraph's step commits (its effect recorded), then the parent's step crashes
    # before it is written
    plan = FaultPlan("before_checkpoint", 2)
    with pytest.raises(_CrashSignal):
        app.invoke(None, {**back, "fault_plan": plan})
    out = app.invoke(None, cfg)
    assert sent == ["s0", "s1", "s1"]  # the replay's one live call, not repeated on resume
    assert seen == [[], ["s"], ["s"]]  # it went back once: the resumed call found its head
    assert out["results"][-1] == "p"


def test_get_state_shows_a_stateful_subgraph_a_node_calls(checkpointer: Checkpointer) -> None:
    def ask(state: Sub) -> dict[str, Any]:
        return {"value": [interrupt("ok?")]}

    inner = StateGraph(Sub).add_node("ask", ask).add_edge(START, "ask")
    sub = inner.compile(checkpointer=True)

    def call(state: Parent) -> dict[str, Any]:
        return {"results": sub.invoke({"value": state["results"]})["value"]}

    app = StateGraph(Parent).add_node("call", call).add_edge(START, "call")
    graph = app.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    graph.invoke({"results": ["a"]}, cfg)
    child = graph.get_state(cfg, subgraphs=True).tasks[0].state
    assert child.values == {"value": ["a"]} and child.next == ("ask",)


def test_on_node_finished_hears_every_finished_node_at_every_depth() -> None:
    finished: list[str] = []
    grandchild = StateGraph(Sub).add_node("g", lambda s: {"value": ["g"]}).add_edge(START, "g")
    child = StateGraph(Sub).add_node("gc", grandchild.compile()).add_edge(START, "gc")
    child.add_node("ask", lambda s: {"value": [interrupt("ok?")]}).add_edge("gc", "ask")
    b = StateGraph(Sub).add_node("p", lambda s: {"value": ["p"]}).add_node("c", child.compile())
    app = b.add_edge(START, "p").add_edge("p", "c").compile()
    cfg = {"configurable": {"thread_id": "t", CONFIG_KEY_NODE_FINISHED: finished.append}}
    out = app.invoke({"value": []}, cfg)
    assert "__interrupt__" in out
    # the grandchild graph finished as the child's node "gc"; "c" and "ask" did not finish
    assert finished == ["p", "g", "gc"]


def test_a_waiting_run_is_answered_through_its_subgraphs_config_and_never_edited(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _asking(checkpointer, called)
    cfg = {"thread_id": "t"}
    app.invoke({"value": []}, cfg)
    sub_config = app.get_state(cfg, subgraphs=True).tasks[0].state.config
    # an edit of the subgraph would change what the waiting run goes on from: refused
    with pytest.raises(UnfinishedRunError):
        app.update_state(sub_config, {"value": ["edited"]})
    assert app.get_state(cfg, subgraphs=True).tasks[0].state.config == sub_config
    # the config of where the thread stands answers the waiting run itself
    out = app.invoke(Command(resume="yes"), sub_config)
    assert "ask:yes" in out["value"] and out["value"][-1] == "post:post"
    assert [r.launch_reason for r in app.runs(thread_id="t")].count("time_travel") == 0

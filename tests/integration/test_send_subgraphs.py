"""Send (map-reduce), subgraphs and waiting edges under the laws, on every path and store.

* ``Send``: each send is its own task with its own payload, recorded in the checkpoint
  before it runs (guarantee 1), its effects keyed by the task (``node:i``), so a crash inside
  one branch re-runs only that branch and serves the recorded effects from the ledger.
* Subgraphs: a compiled graph as a node (or invoked inside a node) runs under the
  parent's run: its checkpoints on its own thread, its effects in the parent's ledger
  with namespaced command ids, its interrupts answered through the parent.
* Waiting edges: ``add_edge([a, b], c)`` runs ``c`` once after both, whatever the
  lengths of the branches (the bug LangGraph users hit).

Crashes are simulated in process with ``FaultPlan`` (the real SIGKILL versions are in
``test_crash_matrix.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, FaultPlan, Send, StateGraph, effect, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import InvalidUpdateError, _CrashSignal
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus

RunPath = Callable[..., dict[str, Any]]


class Jobs(TypedDict, total=False):
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]


class Job(TypedDict):
    subject: str


def _status(app: CompiledGraph, thread: str) -> RunStatus:
    return app.runs(thread_id=thread, limit=1)[0].status


# -- Send ---------------------------------------------------------------------------------


def _jokes(checkpointer: Checkpointer | None, sent: list[str], crash_on: set[str]) -> CompiledGraph:
    def fan_out(state: Jobs) -> list[Send]:
        return [Send("joke", {"subject": s}) for s in state["subjects"]]

    def tell(subject: str) -> str:
        sent.append(subject)
        return f"joke about {subject}"

    def joke(state: Job) -> dict[str, Any]:
        text = effect(tell, state["subject"])  # one effect per branch, keyed by its task
        if state["subject"] in crash_on:
            crash_on.discard(state["subject"])
            raise RuntimeError(f"{state['subject']} branch broke after its effect")
        return {"jokes": [text]}

    g = StateGraph(Jobs)
    g.add_node("joke", joke)
    g.add_conditional_edges(START, fan_out)
    g.add_edge("joke", END)
    return g.compile(checkpointer=checkpointer)


def test_send_runs_one_task_per_payload(checkpointer: Checkpointer, run_path: RunPath) -> None:
    sent: list[str] = []
    app = _jokes(checkpointer, sent, set())
    out = run_path(app, {"subjects": ["cats", "dogs", "cats"]}, {"thread_id": "t"})
    assert out["jokes"] == ["joke about cats", "joke about dogs", "joke about cats"]
    assert sorted(sent) == ["cats", "cats", "dogs"]
    # three effects with three keys, though two branches sent the same request
    records = app.effects(thread_id="t")
    assert sorted(r.command_id for r in records) == ["joke:0:0:0", "joke:1:0:0", "joke:2:0:0"]
    assert len({r.effect_id for r in records}) == 3
    history = list(app.get_state_history({"thread_id": "t"}))
    first = history[1]  # the input checkpoint: every send recorded before any ran
    assert first.next == ("joke", "joke", "joke")
    assert [t.path for t in first.tasks] == [("__pregel_push", i, False) for i in range(3)]


def test_a_failed_send_branch_resumes_alone_and_repeats_no_effect(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []
    app = _jokes(checkpointer, sent, {"dogs"})
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="dogs branch broke"):
        run_path(app, {"subjects": ["cats", "dogs"]}, cfg)
    assert _status(app, "t") is RunStatus.FAILED
    assert sorted(sent) == ["cats", "dogs"]
    out = run_path(app, None, cfg)
    assert out["jokes"] == ["joke about cats", "joke about dogs"]
    assert sorted(sent) == ["cats", "dogs"]  # the dogs effect was served from the ledger
    assert all(r.status is EffectStatus.COMPLETED for r in app.effects(thread_id="t"))


def test_a_crash_inside_a_send_branch_resumes_without_repeating(checkpointer: Checkpointer) -> None:
    sent: list[str] = []
    app = _jokes(checkpointer, sent, set())
    cfg = {"thread_id": "t"}
    # the 2nd effect result recorded is the second branch's: die right after it
    with pytest.raises(_CrashSignal):
        app.invoke(
            {"subjects": ["cats", "dogs"]},
            {**cfg, "fault_plan": FaultPlan("after_effect_record", 2, kill=False)},
        )
    assert sorted(sent) == ["cats", "dogs"]
    out = app.invoke(None, cfg)
    assert sorted(out["jokes"]) == ["joke about cats", "joke about dogs"]
    assert sorted(sent) == ["cats", "dogs"]


def test_command_goto_send_and_typed_payloads() -> None:
    class Item(TypedDict):
        n: int

    class State(TypedDict, total=False):
        total: Annotated[int, operator.add]

    def start(state: State) -> Command[Any]:
        return Command(update={"total": 0}, goto=[Send("add", {"n": i}) for i in (1, 2, 3)])

    def add(state: Item) -> dict[str, Any]:
        return {"total": state["n"]}

    g = StateGraph(State)
    g.add_node("start", start)
    g.add_node("add", add, input_schema=Item)
    g.add_edge(START, "start")
    assert g.compile().invoke({})["total"] == 6


def test_a_send_to_an_unknown_node_or_with_a_bad_payload_fails_the_run() -> None:
    g = StateGraph(Jobs)
    g.add_node("joke", lambda s: None)
    g.add_conditional_edges(START, lambda s: [Send("nope", {})])
    with pytest.raises(Exception, match="nope"):
        g.compile().invoke({"subjects": []})
    g = StateGraph(Jobs)
    g.add_node("joke", lambda s: None)
    g.add_conditional_edges(START, lambda s: [Send("joke", {"when": object()})])
    with pytest.raises(InvalidUpdateError, match=r"payload of Send\('joke'"):
        g.compile().invoke({"subjects": []})


# -- waiting edges ------------------------------------------------------------------------


class Trail(TypedDict, total=False):
    trail: Annotated[list[str], operator.add]


def _mark(name: str) -> Callable[[Trail], dict[str, Any]]:
    return lambda state: {"trail": [name]}


def test_a_waiting_edge_runs_its_target_once_after_branches_of_different_lengths(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    g = StateGraph(Trail)
    for name in ("a", "b", "b_2", "c", "d"):
        g.add_node(name, _mark(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge("b", "b_2")
    g.add_edge(["b_2", "c"], "d")
    g.add_edge("d", END)
    app = g.compile(checkpointer=checkpointer)
    out = run_path(app, {"trail": []}, {"thread_id": "t"})
    assert out["trail"] == ["a", "b", "c", "b_2", "d"]  # d once, after both
    out = run_path(app, {"trail": []}, {"thread_id": "t"})  # and again on the next run
    assert out["trail"].count("d") == 2


# -- subgraphs ----------------------------------------------------------------------------


class Parent(TypedDict, total=False):
    foo: str
    log: Annotated[list[str], operator.add]


class Child(TypedDict, total=False):
    foo: str
    bar: str
    log: Annotated[list[str], operator.add]


def _family(
    checkpointer: Checkpointer | None,
    sent: list[str],
    ask: bool = True,
    crash: list[bool] | None = None,
) -> CompiledGraph:
    def send_mail(to: str) -> str:
        sent.append(to)
        return f"mailed {to}"

    def child_one(state: Child) -> dict[str, Any]:
        return {"bar": effect(send_mail, state["foo"]), "log": ["child_one"]}

    def child_two(state: Child) -> dict[str, Any]:
        answer = interrupt(f"approve {state['bar']}?") if ask else "auto"
        if crash and crash[0]:
            crash[0] = False
            raise RuntimeError("child_two broke")
        return {"foo": f"{state['foo']}|{state['bar']}|{answer}", "log": ["child_two"]}

    cb = StateGraph(Child, name="child")
    cb.add_node("child_one", child_one)
    cb.add_node("child_two", child_two)
    cb.add_edge(START, "child_one")
    cb.add_edge("child_one", "child_two")
    child = cb.compile()

    pb = StateGraph(Parent)
    pb.add_node("prepare", lambda s: {"foo": "ada", "log": ["prepare"]})
    pb.add_node("sub", child)
    pb.add_node("finish", lambda s: {"log": ["finish"]})
    pb.add_edge(START, "prepare")
    pb.add_edge("prepare", "sub")
    pb.add_edge("sub", "finish")
    return pb.compile(checkpointer=checkpointer)


def test_a_compiled_graph_is_a_node_whose_interrupt_is_answered_through_the_parent(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []
    app = _family(checkpointer, sent)
    cfg = {"thread_id": "t"}
    out = run_path(app, {"log": []}, cfg)
    (asked,) = out["__interrupt__"]
    assert asked.value == "approve mailed ada?" and asked.node == "sub"
    assert _status(app, "t") is RunStatus.INTERRUPTED
    state = app.get_state(cfg, subgraphs=True)
    assert state.next == ("sub",)
    child = state.tasks[0].state
    assert child.next == ("child_two",) and child.values["bar"] == "mailed ada"
    assert child.config["configurable"]["checkpoint_ns"].startswith("sub:")
    assert app.get_state(cfg).tasks[0].state == {
        "configurable": {
            "thread_id": "t",
            "checkpoint_ns": child.config["configurable"]["checkpoint_ns"],
        }
    }

    out = run_path(app, Command(resume="yes"), cfg)
    assert out["foo"] == "ada|mailed ada|yes"
    # the child's own log entries came back with its output (shared key, as in LangGraph)
    assert out["log"][:1] == ["prepare"] and out["log"][-1] == "finish"
    assert sent == ["ada"]  # the child re-ran from its own head: the mail went once
    (record,) = app.effects(thread_id="t")
    assert record.command_id.startswith("sub:1|child_one:0:") and record.node.startswith("sub:")
    assert _status(app, "t") is RunStatus.COMPLETED


def test_a_failed_subgraph_resumes_inside_without_repeating_its_effect(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []
    app = _family(checkpointer, sent, ask=False, crash=[True])
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="child_two broke") as info:
        run_path(app, {"log": []}, cfg)
    assert info.value.oncegraph_node == "sub"  # type: ignore[attr-defined]
    assert _status(app, "t") is RunStatus.FAILED
    out = run_path(app, None, cfg)
    assert out["foo"] == "ada|mailed ada|auto"
    assert sent == ["ada"]


def test_a_crash_inside_a_subgraph_effect_resumes_without_repeating(
    checkpointer: Checkpointer,
) -> None:
    sent: list[str] = []
    app = _family(checkpointer, sent, ask=False)
    cfg = {"thread_id": "t"}
    with pytest.raises(_CrashSignal):
        app.invoke(
            {"log": []}, {**cfg, "fault_plan": FaultPlan("after_effect_record", 1, kill=False)}
        )
    assert sent == ["ada"]
    out = app.invoke(None, cfg)
    assert out["foo"] == "ada|mailed ada|auto" and sent == ["ada"]


def test_a_subgraph_invoked_inside_a_node_is_kept_under_the_parent_run(
    checkpointer: Checkpointer,
) -> None:
    sent: list[str] = []
    child = _family(None, sent, ask=False).spec.nodes["sub"].subgraph
    calls: list[str] = []

    def wrapper(state: Parent) -> dict[str, Any]:
        calls.append("wrapper")
        first = child.invoke({"foo": "bob"})
        second = child.invoke({"foo": "cy"})  # a second subgraph call: keys of its own
        if len(calls) == 1:
            raise RuntimeError("after both subgraphs")
        return {"foo": f"{first['foo']} + {second['foo']}"}

    async def awrapper(state: Parent) -> dict[str, Any]:
        out = await child.ainvoke({"foo": "dee"})
        return {"log": [out["foo"]]}

    g = StateGraph(Parent)
    g.add_node("wrapper", wrapper)
    g.add_node("awrapper", awrapper)
    g.add_edge(START, "wrapper")
    g.add_edge("wrapper", "awrapper")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="after both subgraphs"):
        app.invoke({"log": []}, cfg)
    assert sent == ["bob", "cy"]
    out = app.invoke(None, cfg)
    assert out["foo"] == "bob|mailed bob|auto + cy|mailed cy|auto"
    assert out["log"] == ["dee|mailed dee|auto"]
    assert sent == ["bob", "cy", "dee"]  # the re-run wrapper's subgraphs did not mail again
    assert len({r.command_id for r in app.effects(thread_id="t")}) == 3


def test_stream_with_subgraphs_yields_namespaced_chunks(checkpointer: Checkpointer) -> None:
    app = _family(checkpointer, [], ask=False)
    chunks = list(app.stream({"log": []}, {"thread_id": "t"}, subgraphs=True))
    names = [(ns, next(iter(chunk))) for ns, chunk in chunks]
    assert names[0] == ((), "prepare")
    inner = [(ns[0].split(":")[0], node) for ns, node in names if ns]
    assert inner == [("sub", "child_one"), ("sub", "child_two")]
    assert names[-2:] == [((), "sub"), ((), "finish")]
    plain = list(app.stream({"log": []}, {"thread_id": "u"}))
    assert [next(iter(c)) for c in plain] == ["prepare", "sub", "finish"]
    both = list(
        app.stream(
            {"log": []}, {"thread_id": "v"}, stream_mode=["updates", "values"], subgraphs=True
        )
    )
    assert all(len(item) == 3 for item in both)
    assert {(bool(ns), mode) for ns, mode, _ in both} == {
        (False, "updates"),
        (False, "values"),
        (True, "updates"),
        (True, "values"),
    }


def test_send_to_a_subgraph_gives_each_its_payload(checkpointer: Checkpointer) -> None:
    sent: list[str] = []
    child = _family(None, sent, ask=False).spec.nodes["sub"].subgraph

    class Many(TypedDict, total=False):
        names: list[str]
        log: Annotated[list[str], operator.add]

    g = StateGraph(Many)
    g.add_node("child", child)
    g.add_conditional_edges(START, lambda s: [Send("child", {"foo": n}) for n in s["names"]])
    app = g.compile(checkpointer=checkpointer)
    out = app.invoke({"names": ["x", "y"]}, {"thread_id": "t"})
    assert sorted(out["log"]) == ["child_one", "child_one", "child_two", "child_two"]
    assert sorted(sent) == ["x", "y"]
    assert sorted(r.command_id.split("|")[0] for r in app.effects(thread_id="t")) == [
        "child:0:0",
        "child:1:0",
    ]


def test_a_subgraphs_breakpoint_pauses_the_parent_and_invoke_none_goes_on(
    checkpointer: Checkpointer,
) -> None:
    cb = StateGraph(Child, name="child")
    cb.add_node("one", lambda s: {"log": ["one"]})
    cb.add_node("two", lambda s: {"log": ["two"]})
    cb.add_edge(START, "one")
    cb.add_edge("one", "two")
    g = StateGraph(Parent)
    g.add_node("sub", cb.compile(interrupt_before=["two"]))
    g.add_edge(START, "sub")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    out = app.invoke({"log": []}, cfg)
    assert "__interrupt__" not in out and _status(app, "t") is RunStatus.INTERRUPTED
    state = app.get_state(cfg, subgraphs=True)
    assert state.interrupts == () and state.tasks[0].state.next == ("two",)
    out = app.invoke(None, cfg)
    assert out["log"] == ["one", "two"]
    assert _status(app, "t") is RunStatus.COMPLETED

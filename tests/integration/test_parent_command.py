"""``Command(graph=Command.PARENT)``: a subgraph's node updates and routes its parent.

The subgraph stops at that node; the parent's task that ran it (a compiled graph added
as a node, or a node that calls ``sub.invoke()`` / ``await sub.ainvoke()``) ends with
the command instead of the subgraph's output: its update goes onto the parent's state,
its ``goto`` routes the parent. At every depth the nearest enclosing graph gets it. The
ledger's guarantees hold on that path: the node's finished calls are recorded before
the command leaves the subgraph, so a crash before the parent's step is written
resumes without calling again. At the top level (no parent graph) the command is the
run's error, ``ParentCommand``, as in LangGraph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import START, Command, FaultPlan, StateGraph, effect
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, ParentCommand, _CrashSignal
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

RunPath = Callable[..., dict[str, Any]]


class Dialog(TypedDict):
    log: Annotated[list[str], operator.add]


def _child(sent: list[str] | None = None, goto: str = "after") -> CompiledGraph:
    """``first -> jump``; ``jump`` (with an effect when ``sent`` is given) routes the parent."""

    def charge(to: str) -> str:
        assert sent is not None
        sent.append(to)
        return f"charged {to}"

    def jump(state: Dialog) -> Command[Any]:
        note = effect(charge, "ada") if sent is not None else "jumped"
        return Command(graph=Command.PARENT, goto=goto, update={"log": [note]})

    b = StateGraph(Dialog)
    b.add_node("first", lambda s: {"log": ["child first"]})
    b.add_node("jump", jump)
    b.add_node("never", lambda s: {"log": ["never"]})
    b.add_edge(START, "first")
    b.add_edge("first", "jump")
    b.add_edge("jump", "never")
    return b.compile()


def _parent(child: CompiledGraph, checkpointer: Checkpointer | None) -> CompiledGraph:
    b = StateGraph(Dialog)
    b.add_node("sub", child)
    b.add_node("after", lambda s: {"log": ["parent after"]})
    b.add_edge(START, "sub")
    return b.compile(checkpointer=checkpointer)


def test_a_subgraph_node_updates_and_routes_its_parent(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _parent(_child(), checkpointer)
    out = run_path(app, {"log": ["in"]}, {"thread_id": "t"})
    # only the command's update reaches the parent (not the subgraph's state), and its
    # goto ran the parent's node; the subgraph's node after the jump never ran
    assert out == {"log": ["in", "jumped", "parent after"]}
    assert app.runs(thread_id="t", limit=1)[0].status is RunStatus.COMPLETED
    history = [[t.name for t in s.tasks] for s in app.get_state_history({"thread_id": "t"})]
    assert ["after"] in history and ["sub"] in history


@pytest.mark.parametrize("kind", ["sync", "async", "stream", "astream"])
def test_a_subgraph_called_inside_a_node_routes_that_nodes_graph(
    checkpointer: Checkpointer, run_path: RunPath, kind: str
) -> None:
    child = _child()
    reached: list[str] = []

    def call_sync(state: Dialog) -> dict[str, Any]:
        child.invoke(state)
        reached.append("after the call")  # never: the command ends this task
        return {"log": ["returned"]}

    async def call_async(state: Dialog) -> dict[str, Any]:
        await child.ainvoke(state)
        reached.append("after the call")
        return {"log": ["returned"]}

    def call_stream(state: Dialog) -> dict[str, Any]:
        for _ in child.stream(state):
            pass
        reached.append("after the call")
        return {"log": ["returned"]}

    async def call_astream(state: Dialog) -> dict[str, Any]:
        async for _ in child.astream(state):
            pass
        reached.append("after the call")
        return {"log": ["returned"]}

    calls = {"sync": call_sync, "async": call_async, "stream": call_stream}
    b = StateGraph(Dialog)
    b.add_node("call", calls.get(kind, call_astream))
    b.add_node("after", lambda s: {"log": ["parent after"]})
    b.add_edge(START, "call")
    app = b.compile(checkpointer=checkpointer)
    out = run_path(app, {"log": ["in"]}, {"thread_id": "t"})
    assert out == {"log": ["in", "jumped", "parent after"]}
    assert reached == []


def test_the_nearest_enclosing_graph_gets_the_command(checkpointer: Checkpointer) -> None:
    # grandchild's jump routes the CHILD graph (to its "landed" node), not the top one
    inner = _child(goto="landed")
    mid = StateGraph(Dialog)
    mid.add_node("inner", inner)
    mid.add_node("landed", lambda s: {"log": ["child landed"]})
    mid.add_edge(START, "inner")
    top = StateGraph(Dialog)
    top.add_node("mid", mid.compile())
    top.add_node("landed", lambda s: {"log": ["top landed"]})
    top.add_edge(START, "mid")
    app = top.compile(checkpointer=checkpointer)
    out = app.invoke({"log": ["in"]}, {"thread_id": "t"})
    assert "child landed" in out["log"] and "top landed" not in out["log"]
    assert "never" not in out["log"]


def test_at_the_top_level_the_command_is_the_runs_error(checkpointer: Checkpointer) -> None:
    def jump(state: Dialog) -> Command[Any]:
        return Command(graph=Command.PARENT, goto="x", update={"log": ["up"]})

    b = StateGraph(Dialog)
    b.add_node("jump", jump)
    b.add_edge(START, "jump")
    app = b.compile(checkpointer=checkpointer)
    with pytest.raises(ParentCommand) as info:
        app.invoke({"log": []}, {"thread_id": "t"})
    assert info.value.args[0].goto == "x" and info.value.args[0].update == {"log": ["up"]}
    assert "no parent graph" in str(info.value)
    assert app.runs(thread_id="t", limit=1)[0].status is RunStatus.FAILED


def test_only_the_parent_graph_can_be_named() -> None:
    with pytest.raises(ConfigError, match=r"graph=Command\.PARENT"):
        Command(graph="some_graph", goto="x")


def test_a_crash_after_the_subgraphs_effect_resumes_without_calling_again(
    checkpointer: Checkpointer,
) -> None:
    sent: list[str] = []
    app = _parent(_child(sent), checkpointer)
    cfg = {"thread_id": "t"}
    # the child's first step commits (1st before_checkpoint hit); the jump's step is not
    # committed: the command leaves it, its effect recorded; the 2nd hit is the parent's
    # step with the command's update, which crashes before it is written
    with pytest.raises(_CrashSignal):
        app.invoke(
            {"log": []}, {**cfg, "fault_plan": FaultPlan("before_checkpoint", 2, kill=False)}
        )
    assert sent == ["ada"]
    out = app.invoke(None, cfg)
    assert out == {"log": ["charged ada", "parent after"]}
    assert sent == ["ada"]  # the resumed subgraph found the charge in the ledger
    (record,) = app.effects(thread_id="t")
    assert record.command_id.startswith("sub:0|jump:")


def test_a_failed_parent_step_resumes_without_calling_the_subgraphs_effect_again(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []
    broke = [True]

    def after(state: Dialog) -> dict[str, Any]:
        if broke[0]:
            broke[0] = False
            raise RuntimeError("after broke")
        return {"log": ["parent after"]}

    b = StateGraph(Dialog)
    b.add_node("sub", _child(sent))
    b.add_node("after", after)
    b.add_edge(START, "sub")
    app = b.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="after broke"):
        run_path(app, {"log": []}, cfg)
    out = run_path(app, None, cfg)
    assert out == {"log": ["charged ada", "parent after"]} and sent == ["ada"]

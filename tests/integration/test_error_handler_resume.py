"""An error handler that fails after its node failed: the run fails, and the resumed
step runs the handler again with the node's error as kept, never the node (on every
store). A step's shown error is the handler's; the kept node error is the handler's
input only."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from oncegraph import START, StateGraph
from oncegraph.errors import GraphValidationError, NodeError
from oncegraph.storage.protocols import Checkpointer


class S(TypedDict):
    note: str


def test_a_failed_handler_runs_again_on_resume_and_the_node_does_not(
    checkpointer: Checkpointer,
) -> None:
    calls = {"node": 0, "handler": 0}
    seen: list[NodeError] = []
    handler_fails = [True]

    def charge(state: S) -> S:
        calls["node"] += 1
        raise ValueError("card declined")

    def recover(state: S, error: NodeError) -> dict[str, Any]:
        calls["handler"] += 1
        seen.append(error)
        if handler_fails[0]:
            raise RuntimeError("handler down")
        return {"note": "asked for another card"}

    app = (
        StateGraph(S)
        .add_node("charge", charge, error_handler=recover)
        .add_edge(START, "charge")
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError, match="handler down"):
        app.invoke({"note": ""}, config)
    (task,) = app.get_state(config).tasks
    assert "handler down" in str(task.error)  # the step's failure, as the history shows it
    handler_fails[0] = False
    assert app.invoke(None, config) == {"note": "asked for another card"}
    assert calls == {"node": 1, "handler": 2}
    assert seen[1].node == "charge" and "card declined" in str(seen[1].error)
    assert isinstance(seen[0].error, ValueError)  # the first time, the error itself


def test_a_breakpoint_may_name_an_error_handler(checkpointer: Checkpointer) -> None:
    """LangGraph names a node's handler ``__error_handler__<node>``: a breakpoint naming
    it is accepted, and (the handler running in its node's task, as in LangGraph) the
    failed node's handler runs in the same step, no pause between them."""
    calls: list[str] = []

    def charge(state: S) -> S:
        calls.append("node")
        raise ValueError("card declined")

    def recover(state: S, error: NodeError) -> dict[str, Any]:
        calls.append(f"handler for {error.node}")
        return {"note": "recovered"}

    def fallback(state: S) -> dict[str, Any]:
        return {"note": "by default"}

    graph = StateGraph(S).add_node("charge", charge, error_handler=recover)
    app = graph.add_edge(START, "charge").compile(
        checkpointer=checkpointer, interrupt_before=["__error_handler__charge"]
    )
    config = {"configurable": {"thread_id": "t"}}
    assert app.invoke({"note": ""}, config) == {"note": "recovered"}
    assert calls == ["node", "handler for charge"]
    assert app.get_state(config).next == ()
    assert app.invoke(None, config) == {"note": "recovered"}
    assert calls == ["node", "handler for charge"]  # nothing ran again

    with pytest.raises(GraphValidationError, match="not a node of the graph"):
        graph.compile(checkpointer=checkpointer, interrupt_before=["__error_handler__nope"])
    defaults = StateGraph(S).set_node_defaults(error_handler=fallback)
    defaults.add_node("charge", charge).add_edge(START, "charge")
    app = defaults.compile(checkpointer=checkpointer, interrupt_after=["__default_error_handler__"])
    assert app.invoke({"note": ""}, {"configurable": {"thread_id": "t2"}}) == {"note": "by default"}

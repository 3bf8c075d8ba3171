"""A subgraph's state read by its ``checkpoint_ns``, as LangGraph reads it:

* ``get_state`` and ``get_state_history`` given a subgraph task's config (the
  ``{"thread_id", "checkpoint_ns"}`` its parent's snapshot lists as the task's ``state``)
  show the subgraph's own checkpoints, at any depth, each naming the checkpoint that
  called each graph above it (``metadata["parents"]``, the config's ``checkpoint_map``);
* the ``debug`` stream's checkpoint events of a subgraph name the same configs;
* under ``durability="exit"`` a subgraph call that finished leaves no checkpoint in its
  namespace's history (one that asked a question keeps the one it asked on), and a
  namespace whose calling checkpoint was folded has an empty history, not an error.

On every store (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.storage.protocols import Checkpointer


class State(TypedDict):
    path: str


def _step(name: str) -> Any:
    def node(state: State) -> State:
        return {"path": state["path"] + name}

    return node


def _nested(checkpointer: Checkpointer, *, pause: bool = True) -> Any:
    """``top: a -> mid``; ``mid: m -> low``; ``low: x -> y``, paused before ``y``."""
    low = StateGraph(State)
    low.add_node("x", _step("x"))
    low.add_node("y", _step("y"))
    low.add_edge(START, "x")
    low.add_edge("x", "y")
    low.add_edge("y", END)
    mid = StateGraph(State)
    mid.add_node("m", _step("m"))
    low_app: Any = low.compile(interrupt_before=["y"] if pause else None)
    mid.add_node("low", low_app)
    mid.add_edge(START, "m")
    mid.add_edge("m", "low")
    mid.add_edge("low", END)
    top = StateGraph(State)
    top.add_node("a", _step("a"))
    mid_app: Any = mid.compile()
    top.add_node("mid", mid_app)
    top.add_edge(START, "a")
    top.add_edge("a", "mid")
    top.add_edge("mid", END)
    return top.compile(checkpointer=checkpointer)


def _conf(snap: Any) -> dict[str, Any]:
    return dict(snap.config["configurable"])


def test_get_state_by_a_subgraphs_namespace_shows_its_own_state_at_every_depth(
    checkpointer: Checkpointer,
) -> None:
    app = _nested(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"path": ""}, cfg)

    top = app.get_state(cfg)
    assert top.next == ("mid",)
    mid_ns = top.tasks[0].state["configurable"]["checkpoint_ns"]
    assert mid_ns.startswith("mid:")
    mid = app.get_state(top.tasks[0].state)
    assert mid.values == {"path": "am"}
    assert mid.next == ("low",)
    top_id = _conf(top)["checkpoint_id"]
    assert mid.metadata["parents"] == {"": top_id}
    assert _conf(mid)["checkpoint_ns"] == mid_ns
    assert _conf(mid)["checkpoint_map"] == {"": top_id, mid_ns: _conf(mid)["checkpoint_id"]}

    low_ns = mid.tasks[0].state["configurable"]["checkpoint_ns"]
    assert low_ns.startswith(mid_ns + "|low:")
    low = app.get_state(mid.tasks[0].state)
    assert low.values == {"path": "amx"}
    assert low.next == ("y",)
    assert low.metadata["parents"] == {"": top_id, mid_ns: _conf(mid)["checkpoint_id"]}
    assert set(_conf(low)["checkpoint_map"]) == {"", mid_ns, low_ns}

    # the nested snapshot get_state(subgraphs=True) gives is the one read by namespace
    whole = app.get_state(cfg, subgraphs=True)
    assert whole.tasks[0].state == mid._replace(tasks=whole.tasks[0].state.tasks)
    assert whole.tasks[0].state.tasks[0].state == low


def test_history_by_a_subgraphs_namespace_names_the_calling_checkpoints(
    checkpointer: Checkpointer,
) -> None:
    app = _nested(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"path": ""}, cfg)
    top = app.get_state(cfg)
    mid_history = list(app.get_state_history(top.tasks[0].state))
    assert mid_history, "the subgraph's checkpoints are listed"
    assert mid_history[0].values == {"path": "am"}
    top_id = _conf(top)["checkpoint_id"]
    for snap in mid_history:
        assert snap.metadata["parents"] == {"": top_id}
        assert _conf(snap)["checkpoint_map"][""] == top_id
    low_cfg = app.get_state(top.tasks[0].state).tasks[0].state
    low_history = list(app.get_state_history(low_cfg))
    assert low_history[0].next == ("y",)
    mid_ns = top.tasks[0].state["configurable"]["checkpoint_ns"]
    assert set(low_history[0].metadata["parents"]) == {"", mid_ns}


def test_debug_stream_names_a_subgraphs_checkpoints_as_its_history_does(
    checkpointer: Checkpointer,
) -> None:
    app = _nested(checkpointer, pause=False)
    cfg = {"configurable": {"thread_id": "t"}}
    streamed: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for ns, event in app.stream({"path": ""}, cfg, stream_mode="debug", subgraphs=True):
        if event["type"] == "checkpoint":
            streamed.setdefault(ns, []).append(event["payload"])
    assert len(streamed) == 3
    for ns, events in streamed.items():
        wanted = {"configurable": {"thread_id": "t", "checkpoint_ns": "|".join(ns)}}
        history = list(app.get_state_history(wanted))[::-1]
        assert [e["config"] for e in events] == [h.config for h in history]
        assert [e["parent_config"] for e in events] == [h.parent_config for h in history]
        assert [e["metadata"]["parents"] for e in events] == [
            h.metadata["parents"] for h in history
        ]
        if ns:
            assert all("checkpoint_map" in e["config"]["configurable"] for e in events)


@pytest.mark.parametrize("pause", [False, True])
def test_under_exit_a_finished_subgraph_call_leaves_no_checkpoint_in_its_history(
    checkpointer: Checkpointer, pause: bool
) -> None:
    app = _nested(checkpointer, pause=pause)
    cfg = {"configurable": {"thread_id": "t"}}
    namespaces = [
        ns
        for ns, _ in app.stream(
            {"path": ""}, cfg, stream_mode="updates", subgraphs=True, durability="exit"
        )
        if ns
    ]
    if pause:
        top = app.get_state(cfg)
        low_cfg = app.get_state(top.tasks[0].state).tasks[0].state
        asked = list(app.get_state_history(low_cfg))
        assert [s.next for s in asked] == [("y",)]
        result = app.invoke(None, cfg, durability="exit")
        assert result == {"path": "amxy"}
        # the call that finished after the answer adds none; the one it asked on stays
        after = list(app.get_state_history(low_cfg))
        assert [(s.next, s.values) for s in after] == [(("y",), asked[0].values)]
        assert app.get_state(low_cfg).next == ("y",)
    else:
        assert len(set(namespaces)) == 2
        for ns in dict.fromkeys(namespaces):
            wanted = {"configurable": {"thread_id": "t", "checkpoint_ns": "|".join(ns)}}
            assert list(app.get_state_history(wanted)) == []
            assert app.get_state(wanted).values == {}
    assert app.get_state(cfg).values == {"path": "amxy"}


def test_a_subgraph_called_in_the_first_step_is_read_by_its_namespace(
    checkpointer: Checkpointer,
) -> None:
    low = StateGraph(State)
    low.add_node("x", _step("x"))
    low.add_node("y", _step("y"))
    low.add_edge(START, "x")
    low.add_edge("x", "y")
    low.add_edge("y", END)
    low_app: Any = low.compile(interrupt_before=["y"])
    top = StateGraph(State)
    top.add_node("low", low_app)
    top.add_edge(START, "low")
    top.add_edge("low", END)
    app = top.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"path": ""}, cfg)
    task_cfg = app.get_state(cfg).tasks[0].state
    assert task_cfg["configurable"]["checkpoint_ns"] == "low:0"
    child = app.get_state(task_cfg)
    assert (child.values, child.next) == ({"path": "x"}, ("y",))
    assert [s.values for s in app.get_state_history(task_cfg)][:1] == [{"path": "x"}]

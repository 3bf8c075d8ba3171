"""LangGraph's ``checkpointer.delete_thread(thread_id)`` on oncegraph's stores:

* what LangGraph's saver holds of the thread goes (its checkpoints, their task writes, its
  message lists, its subgraphs' checkpoints): ``get_tuple`` finds nothing, the history
  is empty, and the thread id starts afresh on the next input;
* the run records, the effect ledger and the audit log stay, and the deletion is
  audited with what it took;
* a thread with an unfinished run (here, waiting for an answer) is refused and nothing
  is deleted; once that run is given up, the thread may be deleted.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import START, StateGraph, add_messages, interrupt
from oncegraph import effect as effect_helper
from oncegraph.errors import UnfinishedRunError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    topic: str


def _chat(checkpointer: Checkpointer, *, ask: bool = False) -> Any:
    def inner_node(state: State) -> dict[str, Any]:
        return {"messages": [("ai", f"inner on {state['topic']}")]}

    inner = StateGraph(State)
    inner.add_node("inner_node", inner_node)
    inner.add_edge(START, "inner_node")

    def charge(state: State) -> dict[str, Any]:
        receipt = effect_helper(lambda: "receipt-1", effect_type="charge")
        if ask:
            interrupt("more?")
        return {"messages": [("ai", f"charged: {receipt}")]}

    g = StateGraph(State)
    g.add_node("sub", inner.compile())
    g.add_node("charge", charge)
    g.add_edge(START, "sub")
    g.add_edge("sub", "charge")
    return g.compile(checkpointer=checkpointer)


def test_delete_thread_takes_the_checkpoints_and_keeps_runs_effects_and_audit(
    checkpointer: Checkpointer,
) -> None:
    app = _chat(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "hi")], "topic": "a"}, cfg)
    listed = list(checkpointer.list(cfg))  # type: ignore[attr-defined]
    assert any(t.config["configurable"]["checkpoint_ns"] for t in listed)  # a subgraph's
    other = {"configurable": {"thread_id": "other"}}
    app.invoke({"messages": [("user", "hello")], "topic": "b"}, other)
    (run,) = app.runs(thread_id="t")
    (charged,) = app.effects(thread_id="t")
    assert charged.status is EffectStatus.COMPLETED

    checkpointer.delete_thread("t")  # type: ignore[attr-defined]

    assert checkpointer.get_tuple(cfg) is None  # type: ignore[attr-defined]
    assert list(checkpointer.list(cfg)) == []  # type: ignore[attr-defined]
    assert list(app.get_state_history(cfg)) == []
    never = {"configurable": {"thread_id": "never-used"}}
    assert app.get_state(cfg).values == app.get_state(never).values == {"messages": []}
    (kept,) = app.runs(thread_id="t")
    assert kept.run_id == run.run_id and kept.status is RunStatus.COMPLETED
    assert [e.effect_id for e in app.effects(thread_id="t")] == [charged.effect_id]
    (deleted,) = (a for a in app.audit(thread_id="t") if a.action == "delete_thread")
    assert deleted.target_kind == "thread" and deleted.target_id == "t"
    stored = [t for t in listed if not t.config["configurable"]["checkpoint_id"].endswith(".input")]
    assert deleted.details["checkpoints"] == len(stored)  # an input's entry is not stored
    assert deleted.details["kept"] == ["runs", "effects", "audit"]
    # another thread is untouched
    assert [m.content for m in app.get_state(other).values["messages"]] == [
        "hello",
        "inner on b",
        "charged: receipt-1",
    ]

    out = app.invoke({"messages": [("user", "again")], "topic": "c"}, cfg)
    assert [m.content for m in out["messages"]] == ["again", "inner on c", "charged: receipt-1"]
    assert len(app.runs(thread_id="t")) == 2
    assert len(app.effects(thread_id="t")) == 2  # the new run's own call, the old one kept


async def test_delete_thread_is_refused_while_a_run_waits_and_deletes_nothing(
    checkpointer: Checkpointer,
) -> None:
    app = _chat(checkpointer, ask=True)
    cfg = {"configurable": {"thread_id": "t"}}
    await app.ainvoke({"messages": [("user", "hi")], "topic": "a"}, cfg)
    before = [s.config async for s in app.aget_state_history(cfg)]
    assert before

    with pytest.raises(UnfinishedRunError, match=r"app\.abandon\(config\)"):
        await checkpointer.adelete_thread("t")  # type: ignore[attr-defined]

    assert [s.config async for s in app.aget_state_history(cfg)] == before
    assert (await app.aget_state(cfg)).interrupts
    assert not [a for a in app.audit(thread_id="t") if a.action == "delete_thread"]

    await app.aabandon(cfg, reason="not needed", actor="ops")
    await checkpointer.adelete_thread("t")  # type: ignore[attr-defined]
    assert [s async for s in app.aget_state_history(cfg)] == []
    assert [r.status for r in app.runs(thread_id="t")] == [RunStatus.ABANDONED]
    assert len(app.effects(thread_id="t")) == 1

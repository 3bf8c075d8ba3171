"""The service and the run handles read what they hold through ``Forwarded``: the value
of the held object, read-only, and the docstring shown on the class."""

from __future__ import annotations

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.runs.service import RunService
from oncegraph.storage.memory import InMemoryCheckpointer


def test_service_reads_its_context_and_refuses_assignment() -> None:
    store = InMemoryCheckpointer()
    service = RunService(None, store)
    assert service.store is store
    assert service.owner == service.context.owner
    assert service.scope is None
    with pytest.raises(AttributeError, match=r"read-only: it is context\.store"):
        service.store = InMemoryCheckpointer()  # type: ignore[assignment]
    assert service.store is store
    assert "read-only service has none" in (RunService.graph.__doc__ or "")


def test_replay_handle_reads_its_run() -> None:
    from typing import TypedDict

    class S(TypedDict):
        n: int

    builder = StateGraph(S)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    app = builder.compile(checkpointer=InMemoryCheckpointer())
    app.invoke({"n": 1}, {"configurable": {"thread_id": "t"}})
    first = app.runs(thread_id="t")[0]
    made = app.replay(first.run_id, mode="evidence", reason="check", actor="tester")
    assert made.run_id == made.run.run_id != first.run_id
    assert made.thread_id == made.run.thread_id
    assert made.parent_run_id == first.run_id
    assert made.launch_reason == "check"

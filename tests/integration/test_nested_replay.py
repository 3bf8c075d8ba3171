"""A replay's mode reaches every nested graph: evidence and simulation call nothing live,
and a live replay blocks irreversible tools, at any depth.

A ``ReactAgent`` whose refund tool is ``irreversible`` runs inside an outer
``StateGraph`` in two shapes, at one and two levels of nesting:

* ``node``: the compiled agent is a node of the outer graph (and of a middle graph);
* ``invoke``: a plain node calls ``agent.invoke(state)`` (and a middle graph's node
  calls the next level's ``invoke``);
* ``stream`` / ``astream`` / ``batch``: a sync node iterates ``agent.stream(state)``, an
  async node ``agent.astream(state)``, a sync node calls ``agent.batch([state])``.

The outer run refunds once against a real local payment provider. Then each replay of
the outer run is counted at the provider: ``evidence`` and ``simulation`` make no
refund, ``live`` without ``allow_irreversible`` parks before the refund, and ``live``
with the refund allowed makes exactly one more, under the replay's own key. Before this
was fixed, the mode stopped at the outer graph and every one of these replays refunded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from oncegraph import (
    END,
    START,
    FaultPlan,
    MessagesState,
    NeedsReviewError,
    StateGraph,
    current_effect,
    tool,
)
from oncegraph.app import CompiledGraph
from oncegraph.errors import _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

T = "t-nested-replay"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}


@dataclass
class Nested:
    app: CompiledGraph
    client: ProviderClient
    simulated: list[str] = field(default_factory=list)

    def refunds(self) -> list[str]:
        """The idempotency keys of the refunds the provider performed, in order."""
        return [e["idempotency_key"] for e in self.client.effects()]


def _agent(
    client: ProviderClient, simulated: list[str], checkpointer: Checkpointer | None = None
) -> CompiledGraph:
    def pretend(order_id: str, amount: float) -> str:
        simulated.append(order_id)
        return f"simulated refund of {amount:.2f}"

    @tool(effect="irreversible", recipient="payments", simulate=pretend)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        charged = client.charge(
            amount, "eur", order_id, idempotency_key=current_effect().idempotency_key
        )
        return f"refunded {amount:.2f} as {charged['id']}"

    def answer(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return {"content": f"Done: {messages[-1]['content']}"}
        call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "amount": 59.0}}
        return {"content": "", "tool_calls": [call]}

    agent = ReactAgent(model=ScriptedModel(answer), tools=[refund])
    return agent.compile(checkpointer=checkpointer)


def _wrap(inner: CompiledGraph, shape: str, checkpointer: Checkpointer | None) -> CompiledGraph:
    """A graph with ``inner`` one level down: as a node, or invoked inside a node."""
    g = StateGraph(MessagesState)
    if shape == "node":
        g.add_node("inner", inner)
    elif shape == "invoke":

        def call(state: MessagesState) -> dict[str, Any]:
            return inner.invoke(state)

        g.add_node("inner", call)
    elif shape == "batch":

        def call_batch(state: MessagesState) -> dict[str, Any]:
            (out,) = inner.batch([state])
            return dict(out)

        g.add_node("inner", call_batch)
    elif shape == "stream":

        def call_stream(state: MessagesState) -> dict[str, Any]:
            return dict(list(inner.stream(state, stream_mode="values"))[-1])

        g.add_node("inner", call_stream)
    else:

        async def call_astream(state: MessagesState) -> dict[str, Any]:
            last: dict[str, Any] = {}
            async for values in inner.astream(state, stream_mode="values"):
                last = dict(values)
            return last

        g.add_node("inner", call_astream)
    g.add_edge(START, "inner")
    g.add_edge("inner", END)
    return g.compile(checkpointer=checkpointer)


def _nested(checkpointer: Checkpointer, client: ProviderClient, shape: str, depth: int) -> Nested:
    simulated: list[str] = []
    graph = _agent(client, simulated)
    for level in range(depth):
        graph = _wrap(graph, shape, checkpointer if level == depth - 1 else None)
    return Nested(graph, client, simulated)


SHAPES = [
    ("node", 1),
    ("node", 2),
    ("invoke", 1),
    ("invoke", 2),
    ("stream", 1),
    ("astream", 1),
    ("batch", 1),
]


@pytest.fixture(params=SHAPES, ids=lambda p: f"{p[0]}-depth{p[1]}")
def nested(request: pytest.FixtureRequest, checkpointer: Checkpointer) -> Iterator[Nested]:
    shape, depth = request.param
    with FakeProvider() as provider:
        yield _nested(checkpointer, ProviderClient(provider.url), shape, depth)


def _original(n: Nested) -> str:
    out = n.app.invoke(USER, {"thread_id": T})
    assert out["messages"][-1]["content"].startswith("Done: refunded 59.00")
    assert len(n.refunds()) == 1
    return n.app.runs(thread_id=T)[0].run_id


def test_evidence_replay_of_a_nested_graph_calls_nothing(nested: Nested) -> None:
    run_id = _original(nested)
    out = nested.app.replay(run_id, mode="evidence", reason="audit", actor="ana").result
    assert out["messages"][-1]["content"].startswith("Done: refunded 59.00")
    assert len(nested.refunds()) == 1 and nested.simulated == []


def test_simulation_replay_of_a_nested_graph_calls_only_simulate(nested: Nested) -> None:
    run_id = _original(nested)
    out = nested.app.replay(run_id, mode="simulation", reason="what if", actor="ana").result
    assert len(nested.refunds()) == 1
    assert nested.simulated == ["1042"]
    assert any(m.get("content") == "simulated refund of 59.00" for m in out["messages"])


def test_live_replay_of_a_nested_graph_blocks_the_irreversible_refund(nested: Nested) -> None:
    run_id = _original(nested)
    with pytest.raises(NeedsReviewError, match="allow_irreversible"):
        nested.app.replay(run_id, mode="live", reason="try again", actor="ana")
    assert len(nested.refunds()) == 1  # blocked: nothing sent
    (parked,) = [r for r in nested.app.runs() if r.mode == "live"]
    assert parked.status is RunStatus.NEEDS_REVIEW
    nested.app.replay(
        run_id, mode="live", reason="send it", actor="ana", allow_irreversible=["refund"]
    )
    keys = nested.refunds()
    assert len(keys) == 2 and keys[0] != keys[1]  # exactly one more, under its own key


def test_a_graph_with_its_own_checkpointer_is_refused_inside_a_replay(
    checkpointer: Checkpointer,
) -> None:
    """Its run would be a separate, live run that no replay governs."""
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)
        inner = _agent(client, [], InMemoryCheckpointer())  # a run store of its own

        def call(state: MessagesState) -> dict[str, Any]:
            return inner.invoke(state, {"thread_id": "inner-thread"})

        g = StateGraph(MessagesState)
        g.add_node("inner", call)
        g.add_edge(START, "inner")
        g.add_edge("inner", END)
        app = g.compile(checkpointer=checkpointer)
        app.invoke(USER, {"thread_id": T})
        assert len(client.effects()) == 1
        run_id = app.runs(thread_id=T)[0].run_id
        for mode in ("evidence", "simulation", "live"):
            with pytest.raises(Exception, match="checkpointer of its own") as raised:
                app.replay(run_id, mode=mode, reason="audit", actor="ana")
            assert "replay" in str(raised.value)
        assert len(client.effects()) == 1  # nothing was sent by any replay


def test_a_subgraph_streamed_inside_a_node_yields_its_own_events(
    checkpointer: Checkpointer,
) -> None:
    """``stream()`` / ``astream()`` of a graph inside a node stream it as a subgraph: the
    node sees the child's events as a top-level stream of it shows them."""
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)
        inner = _agent(client, [])
        seen: list[list[str]] = []

        def call(state: MessagesState) -> dict[str, Any]:
            updates = list(inner.stream(state))  # LangGraph's default mode: updates
            seen.append([next(iter(u)) for u in updates])
            return {}

        g = StateGraph(MessagesState)
        g.add_node("inner", call)
        g.add_edge(START, "inner")
        g.add_edge("inner", END)
        app = g.compile(checkpointer=checkpointer)
        app.invoke(USER, {"thread_id": T})
        assert seen == [["agent", "tools", "agent"]]
        assert len(client.effects()) == 1
        # its effects are the outer run's: in its ledger, under its thread
        kinds = [e.effect_type for e in app.effects(thread_id=T)]
        assert "refund" in kinds, kinds


def test_a_crash_after_a_nested_refund_resumes_without_refunding_again(
    nested: Nested, run_path: Any
) -> None:
    """On every path and in every nesting shape, the nested refund's record (the second
    effect recorded, after the model turn) survives the crash and serves the resumed run:
    one refund at the provider."""
    with pytest.raises(_CrashSignal):
        nested.app.invoke(
            USER, {"thread_id": T, "fault_plan": FaultPlan("after_effect_record", 2, kill=False)}
        )
    assert len(nested.refunds()) == 1
    out = run_path(nested.app, None, {"thread_id": T})
    assert out["messages"][-1]["content"].startswith("Done: refunded 59.00")
    assert len(nested.refunds()) == 1

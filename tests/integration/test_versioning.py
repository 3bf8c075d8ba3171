"""Versioned resume (guarantee 10): a deploy never makes a stored run guess.

On memory, SQLite and PostgreSQL: a run paused at an approval survives a compatible
deploy; an incompatible one is refused with the options named; a registered state
migration is applied and recorded; a registered previous version runs the run to its
end; an interrupt inserted before an answered one and effects reordered in a node are
detected, not mis-matched.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import pytest

from oncegraph import END, START, Command, FaultPlan, StateGraph, effect, interrupt
from oncegraph.errors import IncompatibleVersionError, NondeterminismError, _CrashSignal
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

T = "t-deploy"


class V1(TypedDict, total=False):
    amount: float
    approved: bool
    paid: str


def graph_v1(paid: list[str]) -> StateGraph:
    def ask(state: V1) -> V1:
        return {"approved": interrupt(f"pay {state['amount']}?") == "yes"}

    def pay(state: V1) -> V1:
        paid.append(f"v1:{state['amount']}")
        return {"paid": f"paid {state['amount']}"}

    g = StateGraph(V1, name="payout", version="1")
    g.add_node("ask", ask)
    g.add_node("pay", pay)
    g.add_edge(START, "ask")
    g.add_edge("ask", "pay")
    g.add_edge("pay", END)
    return g


def paused(checkpointer: Checkpointer, paid: list[str]) -> Any:
    app = graph_v1(paid).compile(checkpointer=checkpointer)
    out = app.invoke({"amount": 10.0}, {"thread_id": T})
    assert "__interrupt__" in out
    return app


def test_a_compatible_deploy_continues_a_paused_run(checkpointer: Checkpointer) -> None:
    paid: list[str] = []
    paused(checkpointer, paid)

    class V2(V1, total=False):
        note: str  # a new optional field

    def ask(state: V2) -> V2:
        return {"approved": interrupt(f"pay {state['amount']}?") == "yes"}

    def pay(state: V2) -> V2:
        paid.append(f"v2:{state['amount']}")
        return {"paid": f"paid {state['amount']}"}

    g = StateGraph(V2, name="payout", version="2")
    g.add_node("ask", ask)
    g.add_node("pay", pay)
    g.add_node("report", lambda s: {"note": "new node, not on this run's way"})
    g.add_edge(START, "ask")
    g.add_edge("ask", "pay")
    g.add_edge("pay", END)
    g.add_edge("report", END)
    v2 = g.compile(checkpointer=checkpointer)
    out = v2.invoke(Command(resume="yes"), {"thread_id": T})
    assert out["paid"] == "paid 10.0" and paid == ["v2:10.0"]


class Routed(TypedDict):
    amount: float
    approved: bool
    paid: str


class RoutedV2(Routed):
    # NotRequired under ``from __future__ import annotations`` (this module): Python 3.11
    # lists the field in __required_keys__, but it is optional and the deploy compatible
    note: NotRequired[str]


def routed_graph(schema: Any, version: str, paid: list[str]) -> StateGraph:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt(f"pay {state['amount']}?") == "yes"}

    def pay(state: dict[str, Any]) -> dict[str, Any]:
        paid.append(f"v{version}:{state['amount']}")
        return {"paid": f"paid {state['amount']}"}

    def route(state: dict[str, Any]) -> str:
        return "pay" if state["approved"] else END

    g = StateGraph(schema, name="routed", version=version)
    g.add_node("ask", ask)
    g.add_node("pay", pay)
    g.add_edge(START, "ask")
    g.add_conditional_edges("ask", route, ["pay", END])
    g.add_edge("pay", END)
    return g


def test_a_compatible_deploy_of_a_routed_graph_with_a_not_required_field_continues(
    checkpointer: Checkpointer,
) -> None:
    """The stored shape comes back from the database as JSON: a router's path map read
    back must equal the same path map built by the new version's code."""
    paid: list[str] = []
    v1 = routed_graph(Routed, "1", paid).compile(checkpointer=checkpointer)
    assert "__interrupt__" in v1.invoke({"amount": 5.0, "paid": ""}, {"thread_id": T})
    v2 = routed_graph(RoutedV2, "2", paid).compile(checkpointer=checkpointer)
    out = v2.invoke(Command(resume="yes"), {"thread_id": T})
    assert out["paid"] == "paid 5.0" and paid == ["v2:5.0"]


def test_an_incompatible_deploy_is_refused_with_the_options(checkpointer: Checkpointer) -> None:
    paid: list[str] = []
    paused(checkpointer, paid)
    g = StateGraph(V1, name="payout", version="2")
    g.add_node("ask", lambda s: {"approved": interrupt("pay?") == "yes"})
    g.add_edge(START, "ask")
    g.add_edge("ask", END)  # "pay" removed
    v2 = g.compile(checkpointer=checkpointer)
    with pytest.raises(IncompatibleVersionError) as refused:
        v2.invoke(Command(resume="yes"), {"thread_id": T})
    text = str(refused.value)
    assert "node 'pay' was removed" in text
    assert "migrations=" in text and "previous_versions=" in text and "abandon" in text
    (run,) = v2.runs(thread_id=T)
    assert run.status is RunStatus.INTERRUPTED and paid == []  # nothing written or run


def test_a_registered_migration_is_applied_and_recorded(checkpointer: Checkpointer) -> None:
    paid: list[str] = []
    paused(checkpointer, paid)

    class V2(TypedDict, total=False):
        total_cents: int  # "amount" became cents, under a new name
        approved: bool
        paid: str

    def pay(state: V2) -> V2:
        paid.append(f"v2:{state['total_cents']}")
        return {"paid": f"paid {state['total_cents']} cents"}

    def cents(stored: dict[str, Any]) -> dict[str, Any]:
        return {"total_cents": round(stored["amount"] * 100)}

    g = StateGraph(V2, name="payout", version="2", state_schema_version=2)
    g.add_node("ask", lambda s: {"approved": interrupt("pay 10.0?") == "yes"})
    g.add_node("pay", pay)
    g.add_edge(START, "ask")
    g.add_edge("ask", "pay")
    g.add_edge("pay", END)
    v2 = g.compile(checkpointer=checkpointer, migrations={"1": cents})
    out = v2.invoke(Command(resume="yes"), {"thread_id": T})
    assert out == {"total_cents": 1000, "approved": True, "paid": "paid 1000 cents"}
    assert paid == ["v2:1000"]
    run = v2.runs(thread_id=T)[0]
    assert [a.action for a in v2.audit(run_id=run.run_id)] == ["migrate", "answer"]
    migrated = [
        s for s in v2.get_state_history({"thread_id": T}) if s.metadata["source"] == "migration"
    ]
    assert len(migrated) == 1 and migrated[0].metadata["migrated_from"] == "1"


def test_a_registered_previous_version_runs_the_run_to_its_end(
    checkpointer: Checkpointer,
) -> None:
    paid: list[str] = []
    paused(checkpointer, paid)
    g = StateGraph(V1, name="payout", version="2")
    g.add_node("ask", lambda s: {"approved": interrupt("pay?") == "yes"})
    g.add_edge(START, "ask")
    g.add_edge("ask", END)  # incompatible on its own
    v2 = g.compile(checkpointer=checkpointer, previous_versions={"1": graph_v1(paid)})
    out = v2.invoke(Command(resume="yes"), {"thread_id": T})
    assert out["paid"] == "paid 10.0" and paid == ["v1:10.0"]  # the old graph's node ran
    assert v2.runs(thread_id=T)[0].status is RunStatus.COMPLETED


def test_an_interrupt_inserted_before_an_answered_one_is_detected(
    checkpointer: Checkpointer,
) -> None:
    class S(TypedDict, total=False):
        amount: str
        confirmed: str

    def two_questions(state: S) -> S:
        return {"amount": interrupt("amount?"), "confirmed": interrupt("confirm?")}

    def three_questions(state: S) -> S:
        interrupt("manager?")  # inserted before the answered one
        return {"amount": interrupt("amount?"), "confirmed": interrupt("confirm?")}

    def app(node: Any) -> Any:
        g = StateGraph(S, name="q")
        g.add_node("ask", node)
        g.add_edge(START, "ask")
        g.add_edge("ask", END)
        return g.compile(checkpointer=checkpointer)

    v1 = app(two_questions)
    v1.invoke({}, {"thread_id": T})
    out = v1.invoke(Command(resume="10"), {"thread_id": T})  # "amount?" answered
    assert out["__interrupt__"][0]["value"] == "confirm?"
    with pytest.raises(IncompatibleVersionError, match=r"now asks 'manager\?'.*'amount\?'"):
        app(three_questions).invoke(Command(resume="yes"), {"thread_id": T})


def test_effects_reordered_in_a_node_are_detected(checkpointer: Checkpointer) -> None:
    class S(TypedDict, total=False):
        done: str

    sent: list[str] = []

    def charge(order: str) -> str:
        sent.append(f"charge {order}")
        return "charged"

    def email(order: str) -> str:
        sent.append(f"email {order}")
        return "emailed"

    def first_charge(state: S) -> S:
        effect(charge, "o1")
        effect(email, "o1")
        return {"done": "yes"}

    def first_email(state: S) -> S:
        effect(email, "o1")
        effect(charge, "o1")
        return {"done": "yes"}

    def app(node: Any) -> Any:
        g = StateGraph(S, name="orders")
        g.add_node("fulfil", node)
        g.add_edge(START, "fulfil")
        g.add_edge("fulfil", END)
        return g.compile(checkpointer=checkpointer)

    with pytest.raises(_CrashSignal):  # the charge is recorded, then the process dies
        app(first_charge).invoke(
            {}, {"thread_id": T, "fault_plan": FaultPlan("after_effect_record")}
        )
    assert sent == ["charge o1"]
    with pytest.raises(NondeterminismError, match=r"now makes 'email'.*recorded 'charge'"):
        app(first_email).invoke(None, {"thread_id": T})
    assert sent == ["charge o1"]  # nothing was sent under the wrong position

"""A crash worker for subgraphs and Send: one run (or its resume) in its own OS process.

``--shape subgraph``: the parent's ``refund`` node is a compiled subgraph whose
``charge`` node charges one order at the fake payment provider through ``effect()``.
``--shape send``: a router sends each of two orders to ``charge`` (one ``Send`` each,
its payload the order), each charging the provider.

Every charge appends a JSON line to ``--calls-log`` BEFORE calling the provider (so the
test counts how often a body ran across processes) and marks ``crash_point("in_tool")``
right after the provider answered: ``ONCEGRAPH_CRASH_AT=in_tool`` SIGKILLs the process
inside the effect, after the provider did the work and before the ledger heard of it.
``--effect write`` re-sends with the same idempotency key on resume;
``--effect irreversible`` reconciles through the provider's ``find_by_key``.

The last stdout line is a JSON report:
``{"outcome", "run_status", "charged": [...], "error"}``.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
from typing import Annotated, Any, TypedDict

from oncegraph import START, Reconciled, Send, StateGraph, current_effect, effect
from oncegraph.runtime.faults import crash_point, declare_crash_point
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord
from oncegraph.testing.provider import ProviderClient

declare_crash_point("in_tool")
ORDERS = (("1042", 59.0), ("1043", 12.5))


class Order(TypedDict):
    order_id: str
    amount: float


class Parent(TypedDict, total=False):
    orders: list[Order]
    charged: Annotated[list[str], operator.add]


class Child(TypedDict, total=False):
    orders: list[Order]
    charged: Annotated[list[str], operator.add]


def build(shape: str, kind: str, provider: str, calls_log: str, store: Checkpointer) -> Any:
    client = ProviderClient(provider)

    def charge_provider(order_id: str, amount: float) -> str:
        line = {"order_id": order_id, "key": current_effect().idempotency_key}
        fd = os.open(calls_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
        charged = client.charge(amount, "eur", order_id, idempotency_key=line["key"])
        crash_point("in_tool")
        return str(charged["id"])

    def find(record: EffectRecord) -> Reconciled:
        found = client.find_by_key(record.effect_id)
        return Reconciled.not_done() if found is None else Reconciled.done(str(found["id"]))

    def charge(order: Order) -> dict[str, Any]:
        charge_id = effect(
            charge_provider,
            order["order_id"],
            order["amount"],
            effect_class=kind,
            reconcile=find if kind == "irreversible" else None,
            recipient="payments",
        )
        return {"charged": [f"{order['order_id']}={charge_id}"]}

    if shape == "send":
        g = StateGraph(Parent)
        g.add_node("charge", charge, input_schema=Order)
        g.add_conditional_edges(START, lambda s: [Send("charge", o) for o in s["orders"]])
        return g.compile(checkpointer=store)

    def charge_first(state: Child) -> dict[str, Any]:
        return charge(state["orders"][0])

    cb = StateGraph(Child, name="refunds")
    cb.add_node("plan", lambda s: None)
    cb.add_node("charge", charge_first)
    cb.add_edge(START, "plan")
    cb.add_edge("plan", "charge")
    g = StateGraph(Parent)
    g.add_node("prepare", lambda s: None)
    g.add_node("refund", cb.compile())
    g.add_node("done", lambda s: None)
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "refund")
    g.add_edge("refund", "done")
    return g.compile(checkpointer=store)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parity_crash_worker")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db")
    where.add_argument("--pg")
    parser.add_argument("--provider", required=True)
    parser.add_argument("--calls-log", required=True)
    parser.add_argument("--shape", choices=("subgraph", "send"), required=True)
    parser.add_argument("--effect", choices=("write", "irreversible"), required=True)
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    args = parser.parse_args(argv)
    store: Checkpointer = (
        PgCheckpointer(postgres_dsn=args.pg) if args.pg else SqliteCheckpointer(args.db)
    )
    app = build(args.shape, args.effect, args.provider, args.calls_log, store)
    cfg = {"thread_id": "crash"}
    orders = [{"order_id": o, "amount": a} for o, a in ORDERS]
    report: dict[str, Any] = {"outcome": "completed"}
    try:
        app.invoke({"orders": orders} if args.mode == "run" else None, cfg)
    except Exception as exc:  # reported to the test, which decides
        report.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
    latest = app.runs(thread_id="crash", limit=1)
    if latest:
        report["run_status"] = str(latest[0].status)
    report["charged"] = sorted(app.get_state(cfg).values.get("charged", []))
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

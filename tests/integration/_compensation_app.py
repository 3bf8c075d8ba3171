"""A shop whose ``charge`` is undone by a compensating ``refund``, over the fake provider.

Used in-process by the compensation tests and, as a script, by the crash test: a fresh
OS process that books (``--book``) or compensates (``--effect ID``) on SQLite (``--db``)
or PostgreSQL (``--pg``), crashing where ``ONCEGRAPH_CRASH_AT`` says. Every refund body
appends its idempotency key to ``--calls-log`` before it calls the provider, so a test
counts the bodies that ran across processes. The last stdout line is a JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from oncegraph import CompensationRequest, Reconciled, current_effect, declare_crash_point, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.context import crash_point
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord
from oncegraph.testing.provider import ProviderClient

T = "t-comp"
CHARGED = declare_crash_point("charged")  # the provider has the charge; nothing recorded
USER = {"messages": [{"role": "user", "content": "book order 1042"}]}


class Shop:
    """``charge`` (irreversible, masked card) compensated by ``refund`` (irreversible,
    reconciled at the provider by its key); ``note`` is an order note tool without one."""

    def __init__(self, checkpointer: Checkpointer, url: str, calls_log: str | None = None):
        self.client = client = ProviderClient(url)
        self.refunds: list[str] = []
        refunds = self.refunds

        def found(record: EffectRecord) -> Reconciled:
            hit = client.find_by_key(record.effect_id)
            return (
                Reconciled.not_done() if hit is None else Reconciled.done(hit["response"]["body"])
            )

        @tool(effect="irreversible", recipient="payments", reconcile=found)
        def refund(original: CompensationRequest, note: str = "") -> dict[str, Any]:
            """Refund a charge."""
            key = current_effect().idempotency_key
            refunds.append(key)
            if calls_log:
                with open(calls_log, "a", encoding="utf-8") as f:
                    f.write(key + "\n")
            if note == "refuse":  # the provider says no: a definite failure, nothing moved
                raise RuntimeError("the provider refused the refund")
            title = f"refund {original.result['id']} of {original.args['order_id']}"
            return client.create_ticket(title, note, idempotency_key=key)

        @tool(effect="irreversible", recipient="payments", mask=["card"], compensate=refund)
        def charge(order_id: str, card: str) -> dict[str, Any]:
            """Charge an order to a card."""
            key = current_effect().idempotency_key
            charged = client.charge(10, "eur", order_id, idempotency_key=key)
            crash_point(CHARGED)
            return charged

        @tool(effect="write", dedup="an order has one note: the last one wins")
        def note(text: str) -> str:
            """Write an order note."""
            return text

        self.refund, self.charge = refund, charge
        calls = [
            {
                "id": "c1",
                "name": "charge",
                "args": {"order_id": "1042", "card": "4111111111111111"},
            },
            {"id": "c2", "name": "note", "args": {"text": "booked"}},
        ]
        model = ScriptedModel.turns({"content": "", "tool_calls": calls}, "Booked.")
        self.app = ReactAgent(model=model, tools=[charge, note]).compile(checkpointer=checkpointer)

    def book(self) -> EffectRecord:
        """Run the agent to its end; the charge's effect record."""
        self.app.invoke(USER, {"thread_id": T})
        return self.effect("charge")

    def effect(self, effect_type: str) -> EffectRecord:
        (found,) = [e for e in self.app.effects(thread_id=T) if e.effect_type == effect_type]
        return found

    def tickets(self) -> list[dict[str, Any]]:
        return [e for e in self.client.effects() if e["kind"] == "ticket"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db")
    parser.add_argument("--pg")
    parser.add_argument("--provider", required=True)
    parser.add_argument("--calls-log")
    parser.add_argument("--effect")
    args = parser.parse_args(argv)
    from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

    store: Checkpointer = (
        PgCheckpointer(postgres_dsn=args.pg) if args.pg else SqliteCheckpointer(args.db)
    )
    shop = Shop(store, args.provider, args.calls_log)
    if args.effect is None:
        report = {"effect_id": shop.book().effect_id}
    else:
        done = shop.app.compensate(args.effect, actor="ana", reason="customer cancelled")
        report = {
            "effect_id": done.effect.effect_id,
            "status": str(done.effect.status),
            "resumed": done.resumed,
        }
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

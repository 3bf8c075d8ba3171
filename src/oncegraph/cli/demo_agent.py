"""The demo's support agent: a scripted model, a lookup tool and a refund tool that moves
money at a (fake, local) payment provider with the effect's idempotency key.

Run as a worker process: ``python -m oncegraph.cli.demo_agent run|resume DB PROVIDER_URL
THREAD``. The demo kills that process in the middle of the refund and resumes in a fresh
one.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from oncegraph import Reconciled, crash_point, current_effect, declare_crash_point, tool
from oncegraph.app import CompiledGraph
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import EffectRecord
from oncegraph.testing.provider import ProviderClient

IN_TOOL = declare_crash_point("in_tool")  # the provider moved the money; no record yet

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "call_1", "name": "lookup_order", "args": {"order_id": "1042"}}]},
    {
        "tool_calls": [
            {"id": "call_1", "name": "refund_order", "args": {"order_id": "1042", "amount": 59.0}}
        ]
    },
    {"content": "I have refunded 59.00 for order 1042. Anything else?"},
]


def build(db: str, provider_url: str) -> CompiledGraph:
    client = ProviderClient(provider_url)

    @tool(effect="read")
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by id and return its status and total."""
        return {"order_id": order_id, "status": "delivered", "total": 59.0}

    def find_refund(record: EffectRecord) -> Reconciled:
        found = client.find_by_key(record.effect_id)
        if found is None:
            return Reconciled.not_done()
        return Reconciled.done(
            f"Refunded {record.request['amount']:.2f} for order {record.request['order_id']}",
            provider_reference=str(found.get("id")),
        )

    @tool(effect="irreversible", reconcile=find_refund, recipient="payments")
    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order. Moves money, so it must not run twice for one request."""
        charge = client.charge(
            amount,
            "EUR",
            order_id,
            idempotency_key=current_effect().idempotency_key,
            kind="refund",
        )
        current_effect().provider_reference = str(charge.get("id"))
        crash_point("in_tool")  # the provider has moved the money; we have not recorded it
        return f"Refunded {amount:.2f} for order {order_id}"

    return ReactAgent(
        model=ScriptedModel(SCRIPT),
        system_prompt=[{"role": "system", "content": "You are a support agent for a shop."}],
        tools=[lookup_order, refund_order],
    ).compile(checkpointer=SqliteCheckpointer(db))


def main(argv: list[str]) -> int:
    mode, db, url, thread = argv
    app = build(db, url)
    config = {"thread_id": thread, "tool_timeout": 60}
    if mode == "run":
        app.invoke({"messages": [{"role": "user", "content": "Please refund order 1042."}]}, config)
    else:
        app.invoke(None, config)
    os.write(1, b"finished\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""A support agent that asks a person before it moves money.

``interrupt_on={"refund_order": True}`` pauses the run before any call of a turn that
wants ``refund_order``: the caller gets the proposed call and answers with a decision
(approve, edit the arguments, or reject with a reason for the model) and who made it.
Every decision is kept in the run's state under ``approvals``. The request names the
exact call (its effect id, recipient, masked arguments) and carries a ``request_hash``;
an answer that names it approves that request and no other. An edit is a new request,
with the edited arguments, that is approved in its turn before anything is sent.

Runs offline (a ScriptedModel plays the model): python examples/support_agent_approval.py
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from oncegraph import Command, current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer

WORKDIR = Path(tempfile.mkdtemp(prefix="oncegraph-approval-"))
PAYMENTS = WORKDIR / "payments.db"  # stands in for your payment provider


@tool(effect="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id and return its status and total."""
    return {"order_id": order_id, "status": "delivered", "total": 59.0}


def refund_order(order_id: str, amount: float) -> str:
    """Refund part or all of an order. Moves money."""
    with sqlite3.connect(PAYMENTS) as psp:  # deduplicates on the idempotency key
        psp.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, order_id, amount)")
        psp.execute(
            "INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)",
            (current_effect().idempotency_key, order_id, amount),
        )
    return f"Refunded {amount:.2f} for order {order_id}"


def final_answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The scripted model's last turn: it reports what the refund tool said."""
    return f"Outcome: {messages[-1]['content']}"


model = ScriptedModel.turns(
    {"tool_calls": [{"name": "lookup_order", "args": {"order_id": "1042"}}]},
    {"tool_calls": [{"name": "refund_order", "args": {"order_id": "1042", "amount": 59.0}}]},
    final_answer,
)

app = ReactAgent(
    model,
    system_prompt="You are a support agent for an online shop.",
    tools=[lookup_order, refund_order],
    interrupt_on={"refund_order": True},  # or {"allowed_decisions": ["approve", "reject"]}
).compile(checkpointer=SqliteCheckpointer(WORKDIR / "runs.db"))

DECISIONS = {
    "approve": {"type": "approve"},
    "edit": {
        "type": "edit",
        "edited_action": {"name": "refund_order", "args": {"order_id": "1042", "amount": 40.0}},
    },
    "reject": {"type": "reject", "message": "Refunds over 50.00 need a manager."},
}
APPROVERS = {"approve": "alice@shop", "edit": "bob@shop", "reject": "carol@shop"}


def main() -> None:
    for name, decision in DECISIONS.items():
        config = {"thread_id": f"ticket-{name}"}
        out = app.invoke({"messages": [{"role": "user", "content": "Refund order 1042."}]}, config)
        question = out["__interrupt__"][0].value
        (action,) = question["action_requests"]
        shown = f"{action['name']} {action['masked_args']} (effect {action['effect_id'][:12]})"
        print(f"[{name}] asks: {shown}")
        answer = {
            "decisions": [decision],
            "approver": APPROVERS[name],
            "request_hash": question["request_hash"],  # what this answer decides on
        }
        out = app.invoke(Command(resume=answer), config)
        if "__interrupt__" in out:  # the edit: the edited call is asked about on its own
            edited = out["__interrupt__"][0].value
            print(f"[{name}] asks again: {edited['action_requests'][0]['args']}")
            approve = {"decisions": [{"type": "approve"}], "approver": APPROVERS[name]}
            approve["request_hash"] = edited["request_hash"]
            out = app.invoke(Command(resume=approve), config)
        print(f"[{name}] model: {out['messages'][-1]['content']}")
        for record in out["approvals"]:
            print(
                f"[{name}] kept in state: {record['decision']} by {record['approver']}"
                f" (tool call {record['tool_call_id']})"
            )
    with sqlite3.connect(PAYMENTS) as psp:
        refunds = psp.execute("SELECT order_id, amount FROM refunds ORDER BY amount").fetchall()
    print(f"refunds at the payment provider: {refunds}")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)  # the example's own temporary directory

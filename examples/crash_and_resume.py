"""Crash and resume, step by step, with a tool that must never be sent twice.

``send_refund`` is ``irreversible``: after a crash that leaves its outcome unknown it is
never simply called again. Its ``reconcile`` hook asks the payment provider what
happened (here: a SQLite table standing in for the provider, keyed by the idempotency
key) and the ledger records the answer.

1. A child process runs the agent and is SIGKILLed right after the provider moved the
   money and before the result was recorded (``ONCEGRAPH_CRASH_AT``).
2. This process looks at the ledger: the refund is ``pending``, its outcome unknown.
3. It continues the run with ``invoke(None, config)``: ``reconcile`` finds the refund, the
   ledger records it as done, and the model gets its answer; the provider holds one
   refund and was called once.
4. The same crash with a tool that has no ``reconcile`` hook parks the run as
   ``needs_review``: an operator must check the provider; nothing is sent again.

Runs offline: python examples/crash_and_resume.py
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from oncegraph import NeedsReviewError, Reconciled, current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import EffectRecord

WORKDIR = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="oncegraph-crash-"))
PROVIDER = WORKDIR / "provider.db"


def provider() -> sqlite3.Connection:
    db = sqlite3.connect(PROVIDER)
    db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, order_id, amount)")
    db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT)")
    return db


def send(order_id: str, amount: float) -> str:
    """What the provider does with a refund request: it moves the money."""
    with provider() as db:
        key = current_effect().idempotency_key
        db.execute("INSERT INTO calls VALUES (?)", (key,))
        db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)", (key, order_id, amount))
    return f"Refunded {amount:.2f} for order {order_id}"


def find_refund(record: EffectRecord) -> Reconciled:
    """Ask the provider about an effect whose outcome is unknown."""
    with provider() as db:
        found = db.execute("SELECT 1 FROM refunds WHERE key = ?", (record.effect_id,)).fetchone()
    if found is None:
        return Reconciled.not_done()  # never arrived: safe to send
    args = record.request
    return Reconciled.done(f"Refunded {args['amount']:.2f} for order {args['order_id']}")


@tool(effect="irreversible", reconcile=find_refund, recipient="payments")
def send_refund(order_id: str, amount: float) -> str:
    """Refund an order. Moves money: never sent twice."""
    return send(order_id, amount)


@tool(effect="irreversible", recipient="payments")
def send_refund_unreconciled(order_id: str, amount: float) -> str:
    """Refund an order, without a way to ask the provider afterwards."""
    return send(order_id, amount)


def build(tool_name: str) -> Any:
    model = ScriptedModel.turns(
        {"tool_calls": [{"name": tool_name, "args": {"order_id": "1042", "amount": 59.0}}]},
        "The refund of 59.00 for order 1042 is done.",
    )
    tools = {"send_refund": send_refund, "send_refund_unreconciled": send_refund_unreconciled}
    return ReactAgent(model, tools=[tools[tool_name]]).compile(
        checkpointer=SqliteCheckpointer(WORKDIR / f"{tool_name}.db")
    )


USER = {"messages": [{"role": "user", "content": "Please refund order 1042."}]}
CONFIG = {"thread_id": "ticket-1042"}


def crash_child(tool_name: str) -> int:
    """Run the agent in a child process that is killed mid-refund; its exit code."""
    env = {**os.environ, "ONCEGRAPH_CRASH_AT": "after_tool_return:2"}  # model call is the 1st
    command = [sys.executable, __file__, "--child", str(WORKDIR), tool_name]
    return subprocess.run(command, env=env).returncode


def calls(key: str = "%") -> int:
    with provider() as db:
        query = "SELECT count(*) FROM calls WHERE key LIKE ?"
        return int(db.execute(query, (key,)).fetchone()[0])


def refunds() -> int:
    with provider() as db:
        return int(db.execute("SELECT count(*) FROM refunds").fetchone()[0])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        build(sys.argv[3]).invoke(USER, CONFIG)
        return
    print(f"1. child process exit {crash_child('send_refund')} (-9: killed by SIGKILL)")
    app = build("send_refund")
    (refund,) = [e for e in app.effects(thread_id="ticket-1042") if e.effect_type == "send_refund"]
    print(f"2. ledger: send_refund is {refund.status}; provider: {refunds()} refund(s)")
    out = app.invoke(None, CONFIG)
    (refund,) = [e for e in app.effects(thread_id="ticket-1042") if e.effect_type == "send_refund"]
    outcomes = [a.outcome for a in refund.attempts]
    print(f"3. resumed: {out['messages'][-1]['content']}")
    print(f"   ledger: send_refund is {refund.status}, attempts {outcomes}")
    print(f"   provider: {refunds()} refund(s) from {calls()} call(s)")

    print(f"4. child process exit {crash_child('send_refund_unreconciled')}")
    app = build("send_refund_unreconciled")
    try:
        app.invoke(None, CONFIG)
    except NeedsReviewError as parked:
        (run,) = app.runs(thread_id="ticket-1042")
        print(f"   resume parks the run as {run.status}: the outcome is unknown and no hook")
        print(f"   can tell; the provider got this refund {calls(parked.effect_id)} time(s)")


if __name__ == "__main__":
    try:
        main()
    finally:
        if sys.argv[1:2] != ["--child"]:  # the parent made the directory: it removes it
            shutil.rmtree(WORKDIR, ignore_errors=True)

"""The app of test_masked_outputs.py: a ``mask=["card"]`` charge whose card shows up
in its arguments, its result, its error, the model's answer and a provider's malformed
tool-call arguments. ``app()`` builds it on ``MASK_TEST_DB`` (for the CLI and workers)."""

from __future__ import annotations

import os
from typing import Any

from oncegraph import tool
from oncegraph.app import CompiledGraph
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.base import parse_tool_args
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer

CARD = "4111111111111111"


@tool(effect="irreversible", recipient="payments", mask=["card"])
def charge(order_id: str, card: str, amount: float = 10.0) -> str:
    """Charge a card for an order."""
    if order_id == "fail":
        raise RuntimeError(f"card {card} declined by issuer")
    return f"charged {amount} to card {card} for {order_id}"


def turn(messages: list[Any], tools: Any) -> Any:
    """``pay order X`` calls charge(X); ``badargs`` is a provider's truncated JSON
    arguments; after the result of ``boom`` the model fails quoting the card."""
    last = messages[-1]
    if last["role"] == "user":
        order = str(last["content"]).split("order ")[-1].split()[0]
        if order == "badargs":  # what an adapter does with a provider's broken JSON
            raw = '{"order_id": "5", "card": "' + CARD + '"'
            args = parse_tool_args(raw, tool="charge", model="openai/gpt-4o-mini")
            return {"content": "", "tool_calls": [{"name": "charge", "args": args}]}
        return {
            "content": "",
            "tool_calls": [{"name": "charge", "args": {"order_id": order, "card": CARD}}],
        }
    content = str(last["content"])
    if "for boom" in content:
        raise RuntimeError(f"the model gave up after {content}")
    return f"done: {content}"


def build(checkpointer: Checkpointer) -> CompiledGraph:
    return ReactAgent(model=ScriptedModel(turn), tools=[charge], name="maskshop").compile(
        checkpointer=checkpointer
    )


def app() -> CompiledGraph:
    db = os.environ["MASK_TEST_DB"]
    postgres = db.startswith("postgres") or "dbname=" in db
    return build(PgCheckpointer(db) if postgres else SqliteCheckpointer(db))

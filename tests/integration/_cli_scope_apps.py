"""Two apps over one database (``SCOPE_DB``, a SQLite path) for the CLI's scope and
masking tests: ``shop`` refunds to a card (a masked field) and then fails with the card
in its error; ``other`` is the same graph under another app name."""

from __future__ import annotations

import os
from typing import Any

from oncegraph import current_effect, tool
from oncegraph.app import CompiledGraph
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer

CARD = "4111111111111111"
USER = {"messages": [{"role": "user", "content": f"refund order 1042 to card {CARD}"}]}


def build(name: str) -> CompiledGraph:
    @tool(effect="write", recipient="payments", mask=["card"])
    def refund(order_id: str, card: str) -> str:
        """Refund an order to a card."""
        return f"refunded {order_id} ({current_effect().idempotency_key})"

    call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}

    def turn(messages: list[Any], tools: Any) -> Any:
        if messages[-1]["role"] != "tool":
            return {"content": "", "tool_calls": [call]}
        raise RuntimeError(f"the ledger refused card {CARD}")

    return ReactAgent(model=ScriptedModel(turn), tools=[refund], name=name).compile(
        checkpointer=SqliteCheckpointer(os.environ["SCOPE_DB"])
    )


def shop() -> CompiledGraph:
    return build("shop")


def other() -> CompiledGraph:
    return build("other")

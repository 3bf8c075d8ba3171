"""The app the server-kill test serves with ``oncegraph serve``: an agent whose one tool
writes an order at the fake provider (a separate process, so it outlives the server),
keyed by its effect's idempotency key (the provider keeps one effect per key)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from oncegraph import current_effect
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.testing.provider import ProviderClient

PROVIDER = ProviderClient(os.environ["KILL_PROVIDER_URL"])
# the provider is a small threading server: a few calls at a time, not sixty-four
_calls = threading.BoundedSemaphore(8)
WORK_SECONDS = float(os.environ.get("KILL_WORK_SECONDS", "0.3"))


def write_order(order_id: str) -> str:
    """Write an order at the provider; it must happen once per order."""
    key = current_effect().idempotency_key
    with _calls:
        done = PROVIDER.charge(10, "eur", order_id, idempotency_key=key)
    time.sleep(WORK_SECONDS)  # the call takes a while: a kill finds runs inside it
    return f"written {done['id']}"


def _order(messages: list[dict[str, Any]]) -> str:
    return next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")


def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
    order = _order(messages)
    if messages[-1]["role"] == "user":
        return {"tool_calls": [{"name": "write_order", "args": {"order_id": order}}]}
    return f"Order {order} written."


app = ReactAgent(
    model=ScriptedModel(answer), system_prompt="You write orders.", tools=[write_order]
)

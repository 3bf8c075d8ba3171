"""The app the CLI tests point ``--app`` at: a support agent with an irreversible refund
(masked card) over the fake payment provider. ``CLI_SHOP_DB`` is the database (a SQLite
path or a PostgreSQL DSN), ``CLI_SHOP_PROVIDER`` the provider's URL.

A run parks the way production parks one: the process dies inside the refund (here an
in-process crash at ``cli_sent``), and the next resume cannot know whether it happened.

The refund declares that the recipient keeps keys forever (the fake provider does, by
default); ``CLI_SHOP_DEDUP_WINDOW=unknown`` makes it declare nothing, a number of
seconds declares that window.
"""

from __future__ import annotations

import os
from typing import Any

from oncegraph import Reconciled, current_effect, declare_crash_point, tool
from oncegraph.app import CompiledGraph
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import crash_point
from oncegraph.testing.provider import ProviderClient

SENT = declare_crash_point("cli_sent")  # the provider has the charge; nothing recorded
CARD = "4111111111111111"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}


def store(db: str) -> Any:
    if db.startswith("postgresql://") or "dbname=" in db:
        from oncegraph.storage.checkpointer import PgCheckpointer

        return PgCheckpointer(db)
    from oncegraph.storage.checkpointer import SqliteCheckpointer

    return SqliteCheckpointer(db)


def build(
    db: str, provider_url: str, *, reconcile: bool = False, dedup_window: str = "forever"
) -> CompiledGraph:
    """``reconcile``: the refund asks the provider by its key (its dashboard);
    ``dedup_window``: ``forever``, ``unknown`` or seconds."""
    client = ProviderClient(provider_url)
    window: dict[str, Any] = {}
    if dedup_window != "unknown":
        window["dedup_window"] = None if dedup_window == "forever" else float(dedup_window)

    def look(record: Any) -> Reconciled:
        found = client.find_by_key(record.effect_id)
        return Reconciled.done(str(found["id"])) if found else Reconciled.not_done()

    @tool(
        effect="irreversible",
        recipient="payments",
        mask=["card"],
        reconcile=look if reconcile else None,
        **window,
    )
    def refund(order_id: str, card: str) -> str:
        """Refund an order to a card."""
        charged = client.charge(
            10, "eur", order_id, idempotency_key=current_effect().idempotency_key
        )
        crash_point(SENT)
        return str(charged["id"])

    call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
    return ReactAgent(model=model, tools=[refund]).compile(checkpointer=store(db))


def app() -> CompiledGraph:
    """The factory ``--app`` names (built from the environment when the CLI loads it)."""
    return build(
        os.environ["CLI_SHOP_DB"],
        os.environ["CLI_SHOP_PROVIDER"],
        reconcile=os.environ.get("CLI_SHOP_RECONCILE") == "1",
        dedup_window=os.environ.get("CLI_SHOP_DEDUP_WINDOW", "forever"),
    )

"""A ReactAgent run (or its resume) over an ENCRYPTED store, in its own OS process.

``--db FILE`` (SQLite) or ``--pg DSN``; ``--keys k1=<hex>,k2=<hex> --current k1`` is
the key ring. The agent's one tool, ``charge(order_id, card)`` (class write, card
masked), appends a line to ``--calls`` before it answers, so the test counts tool runs
across processes. Crashes come from ``ONCEGRAPH_CRASH_AT`` (the test's harness). The last
stdout line is a JSON report: ``{"final", "calls"}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from oncegraph import tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.protocols import Checkpointer

CARD = "4111111111111111"
USER = {"messages": [{"role": "user", "content": f"charge order 1042 to {CARD}"}]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "resume"])
    parser.add_argument("--db")
    parser.add_argument("--pg")
    parser.add_argument("--keys", required=True)
    parser.add_argument("--current", required=True)
    parser.add_argument("--calls", required=True)
    opts = parser.parse_args()
    ring = dict(pair.split("=", 1) for pair in opts.keys.split(","))
    keys = EncryptionKeys({k: bytes.fromhex(v) for k, v in ring.items()}, current=opts.current)
    store: Checkpointer
    if opts.pg:
        from oncegraph.storage.checkpointer import PgCheckpointer

        store = PgCheckpointer(opts.pg, encryption=keys)
    else:
        store = SqliteCheckpointer(opts.db, encryption=keys)
    calls = Path(opts.calls)

    @tool(mask=["card"], dedup="test double: its calls are counted, never repeated")
    def charge(order_id: str, card: str) -> dict[str, str]:
        """Charge an order to a card."""
        with calls.open("a") as f:
            f.write(json.dumps({"order_id": order_id}) + "\n")
        return {"charge": "ch_1", "card": card}

    call = {"id": "c1", "name": "charge", "args": {"order_id": "1042", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Charged.")
    app = ReactAgent(model=model, tools=[charge]).compile(checkpointer=store)
    cfg = {"thread_id": "t-enc"}
    out = app.invoke(USER if opts.mode == "run" else None, cfg)
    count = len(calls.read_text().splitlines()) if calls.exists() else 0
    print(json.dumps({"final": out["messages"][-1]["content"], "calls": count}))


if __name__ == "__main__":
    main()

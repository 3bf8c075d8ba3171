"""An MCP server's tools under the ledger.

``MCPTools`` lists the tools of an MCP server (here ``examples/mcp_refund_server.py``,
started as a subprocess and spoken to over stdio; a URL would use streamable HTTP) and
makes each an oncegraph tool. ``order_status`` is a read: the server marks it read-only
and idempotent. ``create_refund`` is declared a write, because this server deduplicates
on the idempotency key every call carries in ``_meta`` (the same key on every retry and
after a crash); a tool the user does not declare and the server does not mark harmless
to repeat would be ``irreversible``: parked for review after a crash, never re-sent.
Every call is recorded in the effect ledger.

Runs offline (a ScriptedModel plays the model); needs the ``mcp`` extra
(``pip install -e ".[mcp]"``): python examples/mcp_tool.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from mcp import StdioServerParameters

from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.tools.mcp import MCPTools

SERVER = Path(__file__).with_name("mcp_refund_server.py")

model = ScriptedModel.turns(
    {"tool_calls": [{"name": "order_status", "args": {"order_id": "1042"}}]},
    {"tool_calls": [{"name": "create_refund", "args": {"order_id": "1042", "amount": 59.0}}]},
    "Order 1042 is refunded.",
)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="oncegraph-mcp-") as workdir:
        await run(Path(workdir))


async def run(workdir: Path) -> None:
    server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    store = SqliteCheckpointer(workdir / "runs.db")
    async with MCPTools(server, effects={"create_refund": "write"}) as shop:
        tools = await shop.atools()
        print("tools:", ", ".join(f"{t.name} ({t.effect})" for t in tools))
        app = ReactAgent(model, tools=tools).compile(checkpointer=store)
        config = {"thread_id": "mcp-1042"}
        out = await app.ainvoke(
            {"messages": [{"role": "user", "content": "Refund order 1042."}]}, config
        )
        for message in out["messages"]:
            if message["role"] == "tool":
                print(f"{message['name']} -> {message['content']}")
        print("model:", out["messages"][-1]["content"])
        for record in await app.aeffects(thread_id="mcp-1042"):
            if record.effect_class != "model":
                print(
                    f"ledger: {record.effect_type} {record.effect_class} {record.status}, "
                    f"idempotency key {record.effect_id[:12]}..."
                )
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())

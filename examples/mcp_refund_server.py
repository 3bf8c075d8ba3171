"""A small MCP server with one side effect, for ``examples/mcp_tool.py`` (stdio).

``create_refund`` deduplicates on the idempotency key oncegraph sends in the request's
``_meta`` (under ``io.oncegraph/idempotency-key``): a repeated key returns the first
refund and moves no money again. That is what makes it safe as a ``write`` tool, which a
resumed run may call again after a crash (the client declares it so; the server's
annotations say nothing of it). ``order_status`` is marked read-only and idempotent, so
oncegraph makes it a ``read`` without being told. Needs the ``mcp`` extra.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from oncegraph.tools.mcp import IDEMPOTENCY_META_KEY

server: MCPServer = MCPServer("shop-refunds", log_level="WARNING")
refunds: dict[str, dict[str, Any]] = {}  # idempotency key -> refund (one process's memory)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def order_status(order_id: str) -> dict[str, Any]:
    """The status and total of an order."""
    return {"order_id": order_id, "status": "delivered", "total": 59.0}


@server.tool()
def create_refund(order_id: str, amount: float, ctx: Context) -> dict[str, Any]:
    """Refund an amount of an order. Moves money; deduplicates on the idempotency key."""
    key = (ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY)
    if key is not None and key in refunds:
        return {**refunds[key], "replayed": True}
    refund = {"refund_id": f"re_{len(refunds) + 1}", "order_id": order_id, "amount": amount}
    if key is not None:
        refunds[key] = refund
    return {**refund, "replayed": False}


if __name__ == "__main__":
    server.run("stdio")

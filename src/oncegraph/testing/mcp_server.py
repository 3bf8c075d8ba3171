"""A small MCP server that counts its side effects per idempotency key, in a file.

Tests (and examples) use it as the ground truth for MCP tools under the ledger: it runs
as its own OS process, so it outlives a client that is SIGKILLed mid-run, and its state
is a JSON file, so a stdio server started afresh by a resumed client sees what the one
before it did::

    python -m oncegraph.testing.mcp_server --state FILE                       # stdio
    python -m oncegraph.testing.mcp_server --state FILE --http --port-file P  # streamable HTTP

Tools:

* ``create_refund(order_id, amount)`` (a side effect): performs a refund, unless the
  request's ``_meta`` carries an idempotency key (under ``--meta-key``, default
  :data:`~oncegraph.tools.mcp.IDEMPOTENCY_META_KEY`) that was seen before; then it returns
  the first refund again and performs nothing. A key seen with other arguments is
  refused (an error result), as Stripe refuses it; so is an amount that is not positive.
  It declares no annotations (what most servers do).
* ``order_status(order_id)`` (a read, annotated ``readOnlyHint`` and ``idempotentHint``):
  the refunds of an order.
* ``set_order_note(order_id, note)`` (annotated ``idempotentHint``, not destructive):
  sets an order's note; setting the same note again changes nothing.
* ``cancel_order(order_id)`` (annotated ``destructiveHint``, not idempotent): cancels an
  order, once per call (a second call cancels again and says so).

The state file holds ``{"refunds": [...], "by_key": {key: refund id}, "calls": n,
"notes": {order: note}, "note_calls": n, "cancels": [order, ...]}``; ``calls`` counts
every ``create_refund`` request that reached the server, ``refunds`` the effects
performed, ``note_calls`` every ``set_order_note`` request, ``cancels`` every
cancellation. Writes are serialized with an OS file lock and replace the file
atomically, so concurrent server processes (one per client session) never lose one.
Needs the ``mcp`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from oncegraph.tools.mcp import IDEMPOTENCY_META_KEY

__all__ = ["build_server", "main", "read_state"]


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The server's state file (empty state if it does not exist yet)."""
    p = Path(path)
    empty: dict[str, Any] = {
        "refunds": [],
        "by_key": {},
        "calls": 0,
        "notes": {},
        "note_calls": 0,
        "cancels": [],
    }
    if not p.exists():
        return empty
    data: dict[str, Any] = json.loads(p.read_text())
    return {**empty, **data}


@contextlib.contextmanager
def _locked_state(path: Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write the state under an exclusive lock; the file is replaced atomically."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(path)
        yield state
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)


def build_server(
    state_file: str | os.PathLike[str], meta_key: str = IDEMPOTENCY_META_KEY
) -> MCPServer:
    """The :class:`MCPServer` with the two tools, keeping its state in ``state_file``."""
    path = Path(state_file)
    server: MCPServer = MCPServer("oncegraph-test-refunds", log_level="WARNING")

    @server.tool()
    def create_refund(order_id: str, amount: float, ctx: Context) -> dict[str, Any]:
        """Refund an amount of an order. Moves money: send an idempotency key in _meta."""
        if amount <= 0:
            raise ToolError(f"amount must be positive, got {amount}; nothing was done")
        meta = ctx.request_context.meta or {}
        key = meta.get(meta_key)
        request = {"order_id": order_id, "amount": amount}
        with _locked_state(path) as state:
            state["calls"] += 1
            if key is not None and key in state["by_key"]:
                first = next(r for r in state["refunds"] if r["id"] == state["by_key"][key])
                if first["request"] != request:
                    raise ToolError(
                        f"idempotency key {key!r} was first used with {first['request']}; "
                        "nothing was done"
                    )
                return {**first["result"], "replayed": True}
            refund_id = f"re_{len(state['refunds']) + 1:04d}"
            result = {"refund_id": refund_id, "order_id": order_id, "amount": amount}
            state["refunds"].append(
                {"id": refund_id, "key": key, "request": request, "result": result}
            )
            if key is not None:
                state["by_key"][key] = refund_id
        return {**result, "replayed": False}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def order_status(order_id: str) -> dict[str, Any]:
        """The refunds made for an order so far."""
        refunds = [r["result"] for r in read_state(path)["refunds"]]
        return {"order_id": order_id, "refunds": [r for r in refunds if r["order_id"] == order_id]}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
    def set_order_note(order_id: str, note: str) -> dict[str, Any]:
        """Set the note of an order (setting the same note again changes nothing)."""
        with _locked_state(path) as state:
            state["note_calls"] += 1
            state["notes"][order_id] = note
        return {"order_id": order_id, "note": note}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False))
    def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancel an order. Every call cancels (and refunds shipping) again."""
        with _locked_state(path) as state:
            state["cancels"].append(order_id)
            times = state["cancels"].count(order_id)
        return {"order_id": order_id, "cancelled": times}

    return server


def _serve_http(server: MCPServer, host: str, port: int, port_file: str | None) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    if port_file:
        tmp = port_file + ".tmp"
        Path(tmp).write_text(str(sock.getsockname()[1]))
        os.replace(tmp, port_file)
    app = server.streamable_http_app(host=host)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oncegraph.testing.mcp_server")
    parser.add_argument("--state", required=True, help="JSON state file")
    parser.add_argument("--meta-key", default=IDEMPOTENCY_META_KEY)
    parser.add_argument("--http", action="store_true", help="streamable HTTP, not stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="(--http) write the bound port here")
    args = parser.parse_args(argv)
    server = build_server(args.state, args.meta_key)
    if args.http:
        _serve_http(server, args.host, args.port, args.port_file)
    else:
        server.run("stdio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

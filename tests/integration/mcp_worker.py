"""The MCP crash worker: one ReactAgent run (or its resume) whose refund tool is an MCP tool.

The agent (a :class:`ScriptedModel`: turn 0 asks for ``create_refund``, turn 1 answers)
runs on SQLite (``--db``); the tool comes from the MCP server
:mod:`oncegraph.testing.mcp_server`, over streamable HTTP (``--url``, a server the test
started) or stdio (``--stdio-state FILE``: this process starts the server as its child,
and a resumed process starts a new one on the same state file). Crashes come from the
environment (``ONCEGRAPH_CRASH_AT=after_mcp_call``), set by the test harness.

Prints one JSON report as its last stdout line::

    {"outcome": "completed" | "error", "error", "run_status", "final", "tool_messages",
     "effects": [{"effect_type", "status", "effect_id", "attempts"}]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from mcp import StdioServerParameters

from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.tools.mcp import MCPTools

THREAD = "mcp-crash"
FINAL = "Refund done."
REFUND_ARGS = {"order_id": "1042", "amount": 59.0}


def server_spec(url: str | None, stdio_state: str | None) -> Any:
    if url:
        return url
    assert stdio_state
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "oncegraph.testing.mcp_server", "--state", stdio_state],
        env=dict(os.environ),
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"name": "create_refund", "args": REFUND_ARGS}]}, FINAL
    )
    report: dict[str, Any] = {"outcome": "completed"}
    async with MCPTools(
        server_spec(args.url, args.stdio_state), effects={"create_refund": "write"}
    ) as server:
        app = ReactAgent(
            model=model, system_prompt="You refund orders.", tools=await server.atools()
        ).compile(checkpointer=SqliteCheckpointer(args.db))
        config = {"thread_id": THREAD, "tool_timeout": 60}
        user = {"messages": [{"role": "user", "content": "Refund order 1042."}]}
        try:
            await app.ainvoke(user if args.mode == "run" else None, config)
        except Exception as exc:  # reported to the test, which decides
            report.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
        runs = await app.aruns(thread_id=THREAD, limit=1)
        report["run_status"] = str(runs[0].status) if runs else None
        if report["outcome"] == "completed":
            messages = (await app.aget_state({"thread_id": THREAD})).values["messages"]
            report["final"] = messages[-1]["content"]
            report["tool_messages"] = [
                {"status": m["status"], "content": m["content"]}
                for m in messages
                if m["role"] == "tool"
            ]
        report["effects"] = [
            {
                "effect_type": e.effect_type,
                "status": str(e.status),
                "effect_id": e.effect_id,
                "attempts": len(e.attempts),
            }
            for e in await app.aeffects(thread_id=THREAD)
            if not e.effect_type.startswith("model:")
        ]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(prog="mcp_worker")
    parser.add_argument("--db", required=True)
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url")
    target.add_argument("--stdio-state")
    report = asyncio.run(run(parser.parse_args()))
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

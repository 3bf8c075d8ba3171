"""10xGraph on the tool-loop workload.

The graph is ReactAgent's shape, built the way ``tenxgraph.prebuilt.agent.react`` builds it
(node ``MAIN`` -> conditional ``TOOL`` -> ``MAIN``, entry ``MAIN``), with a scripted model
function in place of the LLM-backed ``Agent`` node (which needs a provider client) and the
prebuilt ``ToolNode``. 10xGraph writes a durable checkpoint after every node
(``durable_checkpoint_every_step`` defaults to true) and records each tool call in its tool
ledger, keyed by the assistant message id and call id, before the node goes on.

Stores: ``SqliteCheckpointer`` (aiosqlite; it sets WAL and synchronous=NORMAL itself; this
script sets synchronous=FULL on its connection after setup, for parity) and ``PgCheckpointer``
(asyncpg on a fresh database, plus Redis for its realtime cache, ONCEGRAPH_TEST_REDIS_URL or
redis://127.0.0.1:6379/0). Each (store, N) runs in its own subprocess, because 10xGraph binds
the checkpointer into a process-wide injection container at compile time.

Its cost per step grows with N, so a timed run is stopped after BENCH_TENXGRAPH_CAP_SECONDS
(default 25) and reported with the steps it completed (``truncated``: true, ``target_n``).

    benchmarks/.venvs/tenxgraph/bin/python benchmarks/peers/tenxgraph_toolloop.py 10 200 1000
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _common import emit, fresh_pg_database, fresh_sqlite_file, note, parse_args, sqlite_pragmas

EFFECTS: list[int] = []
PROGRESS: Any = None  # a line-buffered file: "start <t>" then "step <t>" per effect


def record_effect(i: int) -> str:
    """Perform one side effect."""
    EFFECTS.append(i)  # the side effect: a trivial function
    if PROGRESS is not None:
        PROGRESS.write(f"step {time.perf_counter()}\n")
    return f"done {i}"


def build(n: int, checkpointer: Any) -> Any:
    from tenxgraph.core.graph import StateGraph, ToolNode
    from tenxgraph.core.state import Message
    from tenxgraph.prebuilt.agent.react import _should_use_tools
    from tenxgraph.utils.constants import END

    def model(state: Any, config: dict[str, Any]) -> Any:
        done = sum(1 for m in state.context if m.role == "tool")
        if done >= n:
            return Message.text_message("finished", role="assistant")
        reply = Message.text_message("", role="assistant")
        reply.tools_calls = [
            {
                "id": f"call_{done}",
                "type": "function",
                "function": {"name": "record_effect", "arguments": json.dumps({"i": done})},
            }
        ]
        return reply

    graph: Any = StateGraph()
    graph.add_node("MAIN", model)
    graph.add_node("TOOL", ToolNode([record_effect]))
    graph.add_conditional_edges("MAIN", _should_use_tools, {"TOOL": "TOOL", END: END})
    graph.add_edge("TOOL", "MAIN")
    graph.set_entry_point("MAIN")
    return graph.compile(checkpointer=checkpointer)


@contextlib.asynccontextmanager
async def checkpointer_for(store: str) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    if store == "sqlite":
        from tenxgraph.storage.checkpointer.sqlite_checkpointer import SqliteCheckpointer

        with fresh_sqlite_file("tenxgraph", wal=False) as path:
            cp = SqliteCheckpointer(path)
            await cp.asetup()
            conn = cp._conn  # private: the only way to reach its connection's pragmas
            if conn is not None:
                await conn.execute("PRAGMA synchronous=FULL")
            ledger = type(cp).aput_tool_result is not _base_put()
            try:
                yield cp, {"sqlite": sqlite_pragmas(path), "tool_ledger": ledger}
            finally:
                await cp.arelease()
    else:
        from tenxgraph.storage.checkpointer.pg_checkpointer import PgCheckpointer

        redis_url = os.environ.get("ONCEGRAPH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        with fresh_pg_database("tenxgraph") as dsn:
            cp = PgCheckpointer(postgres_dsn=dsn, redis_url=redis_url, release_resources=True)
            await cp.asetup()
            ledger = type(cp).aput_tool_result is not _base_put()
            info: dict[str, Any] = {"tool_ledger": ledger}
            try:
                yield cp, info
            finally:
                await cp.arelease()
                info["ledger_rows"] = _count_rows(dsn, "tool_executions")


def _count_rows(dsn: str, table: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0


def _base_put() -> Any:
    from tenxgraph.storage.checkpointer.base_checkpointer import BaseCheckpointer

    return BaseCheckpointer.aput_tool_result


async def measure(store: str, n: int) -> None:
    from tenxgraph.core.state import Message

    loop = asyncio.get_running_loop()
    async with checkpointer_for(store) as (cp, info):

        async def run(steps: int) -> None:
            app = build(steps, cp)
            config = {"thread_id": uuid.uuid4().hex, "user_id": "bench"}
            config["recursion_limit"] = 2 * steps + 10
            await app.ainvoke({"messages": [Message.text_message(f"do {steps} things")]}, config)

        await run(2)  # warm-up
        before = len(EFFECTS)
        start = loop.time()
        if PROGRESS is not None:
            PROGRESS.write(f"start {time.perf_counter()}\n")
        await run(n)
        seconds = loop.time() - start
        assert len(EFFECTS) - before == n, f"{len(EFFECTS) - before} effects for {n} steps"
    # ledger_rows (postgres): rows in its tool ledger after the warm-up (2) and this run (n)
    emit("tenxgraph", store, n, seconds, f"10xgraph {version('10xgraph')}", **info)


def run_bounded(store: str, n: int, cap: float) -> None:
    """Run one measurement in a child; stop it ``cap`` seconds into the timed run.

    A stopped run is reported honestly: ``n`` is the number of steps completed before
    the cap, ``target_n`` the steps asked for, and ``truncated`` is true.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".progress") as progress:
        env = {**os.environ, "BENCH_PROGRESS": progress.name}
        child = subprocess.Popen([sys.executable, __file__, "--one", store, str(n)], env=env)
        started: float | None = None
        while child.poll() is None:
            time.sleep(0.1)
            if started is None and "start" in Path(progress.name).read_text():
                started = time.monotonic()
            if started is not None and time.monotonic() - started > cap:
                child.kill()
                child.wait()
                lines = Path(progress.name).read_text().split()
                t0 = float(lines[1])
                steps = [float(t) for k, t in zip(lines[2::2], lines[3::2], strict=True)]
                if steps:
                    emit(
                        "tenxgraph",
                        store,
                        len(steps),
                        steps[-1] - t0,
                        f"10xgraph {version('10xgraph')}",
                        target_n=n,
                        truncated=True,
                        cap_seconds=cap,
                    )
                return
        if child.returncode != 0:
            note(f"tenxgraph {store} n={n} failed with exit code {child.returncode}")


def main() -> None:
    global PROGRESS
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        logging.disable(logging.WARNING)
        if os.environ.get("BENCH_PROGRESS"):
            PROGRESS = open(os.environ["BENCH_PROGRESS"], "w", buffering=1)  # noqa: SIM115
        asyncio.run(measure(sys.argv[2], int(sys.argv[3])))
        return
    args = parse_args(__doc__ or "")
    cap = float(os.environ.get("BENCH_TENXGRAPH_CAP_SECONDS", "25"))
    for store in args.stores:
        for n in args.n:
            run_bounded(store, n, cap)


if __name__ == "__main__":
    main()

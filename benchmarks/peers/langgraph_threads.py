"""LangGraph on the many-threads workload: many one-step runs, one thread each.

A run is the ``toolnode`` shape of ``langgraph_toolloop.py`` with N = 1: a scripted model
turn that emits one tool call, prebuilt ``ToolNode``, a last model turn (one model turn +
one tool call, as oncegraph's ``threads`` workload). 1,000 runs (``--runs``), each on its
own thread, at each concurrency (``--concurrency``, default 1,8,64): ``asyncio.gather``
over ``ainvoke`` with a semaphore, ``durability="sync"``. Stores: AsyncSqliteSaver on a
SQLite file (WAL, synchronous=FULL) and AsyncPostgresSaver over a psycopg pool of
``concurrency`` connections (a fresh database per measurement). The clock covers the runs
only: store creation, setup and a warm-up run are outside it.

    benchmarks/.venvs/langgraph/bin/python benchmarks/peers/langgraph_threads.py
    benchmarks/.venvs/langgraph/bin/python benchmarks/peers/langgraph_threads.py \
        --stores postgres --concurrency 64
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any

from _common import emit_threads, fresh_pg_database, fresh_sqlite_file, parse_threads_args
from langgraph_toolloop import EFFECTS, _input, _invoke_kwargs, toolnode_graph


@contextlib.asynccontextmanager
async def saver_for(store: str, pool_size: int) -> AsyncIterator[Any]:
    if store == "sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        with fresh_sqlite_file("langgraph_threads") as path:
            async with aiosqlite.connect(path) as conn:
                await conn.execute("PRAGMA synchronous=FULL")
                saver = AsyncSqliteSaver(conn)
                await saver.setup()
                yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        with fresh_pg_database("langgraph_threads") as dsn:
            kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
            async with AsyncConnectionPool(
                dsn, min_size=pool_size, max_size=pool_size, kwargs=kwargs, open=False
            ) as pool:
                await pool.wait()
                saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
                await saver.setup()
                yield saver


async def measure(store: str, runs: int, concurrency: int) -> None:
    async with saver_for(store, concurrency) as saver:
        app = toolnode_graph(1).compile(checkpointer=saver)
        kwargs = _invoke_kwargs(app)
        warmup = {"configurable": {"thread_id": "warmup"}}
        await app.ainvoke(_input("toolnode", 1), warmup, **kwargs)
        sem = asyncio.Semaphore(concurrency)
        before = len(EFFECTS)

        async def one(i: int) -> None:
            async with sem:
                config = {"configurable": {"thread_id": f"t{i}"}, "recursion_limit": 20}
                await app.ainvoke(_input("toolnode", 1), config, **kwargs)

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(runs)))
        seconds = time.perf_counter() - start
        assert len(EFFECTS) - before == runs, "every run must perform exactly one effect"
    emit_threads(
        "langgraph-threads",
        store,
        runs,
        seconds,
        f"langgraph {version('langgraph')}",
        concurrency,
        invoke=kwargs,
    )


def main() -> None:
    args = parse_threads_args(__doc__ or "", "one thread each")
    for store in args.stores:
        for concurrency in args.concurrency:
            asyncio.run(measure(store, args.runs, concurrency))


if __name__ == "__main__":
    main()

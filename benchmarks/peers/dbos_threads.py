"""DBOS on the many-threads workload: many one-step workflows, one per run.

A run is one ``@DBOS.workflow`` with two recorded ``@DBOS.step``s: the model turn (a
scripted function returning one tool call) and the tool call (a trivial side effect), the
shape of oncegraph's ``threads`` workload. 1,000 runs (``--runs``), each its own workflow,
at each concurrency (``--concurrency``, default 1,8,64): ``asyncio.gather`` over the async
workflow with a semaphore. System database: a SQLite file (WAL; SQLite's default
synchronous=FULL) or a fresh PostgreSQL database, with DBOS's own pool sized to at least
the concurrency. The clock covers the runs only: launch and a warm-up run are outside it.

    benchmarks/.venvs/dbos/bin/python benchmarks/peers/dbos_threads.py
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib.metadata import version
from typing import Any

from _common import emit_threads, fresh_pg_database, fresh_sqlite_file, parse_threads_args
from dbos import DBOS

EFFECTS: list[int] = []


@DBOS.step()
async def model_turn(i: int) -> dict[str, Any]:
    return {"name": "record_effect", "args": {"i": i}, "id": f"call_{i}"}


@DBOS.step()
async def record_effect(i: int) -> str:
    EFFECTS.append(i)  # the side effect: a trivial function
    return f"done {i}"


@DBOS.workflow()
async def one_run(i: int) -> str:
    call = await model_turn(i)
    return await record_effect(call["args"]["i"])


async def run_all(runs: int, concurrency: int) -> float:
    await one_run(-1)  # warm-up
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await one_run(i)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    return time.perf_counter() - start


def measure(store: str, runs: int, concurrency: int) -> None:
    ctx: Any = fresh_sqlite_file("dbos_threads") if store == "sqlite" else None
    with ctx if ctx is not None else fresh_pg_database("dbos_threads") as where:
        url = f"sqlite:///{where}" if store == "sqlite" else where
        config: Any = {
            "name": "bench-threads",
            "system_database_url": url,
            "log_level": "ERROR",
            "sys_db_pool_size": max(20, concurrency + 4),
        }
        DBOS(config=config)
        DBOS.launch()
        try:
            before = len(EFFECTS)
            seconds = asyncio.run(run_all(runs, concurrency))
            assert len(EFFECTS) - before == runs + 1, "every run must perform exactly one effect"
        finally:
            DBOS.destroy()
    emit_threads("dbos-threads", store, runs, seconds, f"dbos {version('dbos')}", concurrency)


def main() -> None:
    args = parse_threads_args(__doc__ or "", "one workflow each")
    logging.getLogger("dbos").setLevel(logging.ERROR)
    for store in args.stores:
        for concurrency in args.concurrency:
            measure(store, args.runs, concurrency)


if __name__ == "__main__":
    main()

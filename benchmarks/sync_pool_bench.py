"""K concurrent runs of a sync tool that sleeps S seconds: do they all run at once?

Each run is one model turn (an async node) and one call of a sync ``write`` tool through
``ToolNode`` and the ledger, on an in-memory store; K runs go through ``ainvoke`` with
``asyncio.gather``. With enough threads every K takes about S seconds; with a pool of T
threads, K runs take about ceil(K / T) x S. Pools: the process pool (64 threads, the
default) and ``compile(sync_threads=6)`` (what asyncio's default executor gives on a
2-core machine: ``min(32, cores + 4)``).

    python benchmarks/sync_pool_bench.py --sleep 0.5 --runs 6,12,24,48
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Annotated, Any, TypedDict

from oncegraph import END, START, StateGraph, ToolNode, add_messages, tool
from oncegraph.storage.checkpointer import InMemoryCheckpointer


class S(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]


def build(sleep: float, sync_threads: int | None) -> Any:
    @tool(effect="write", dedup="benchmark: sleeps, changes nothing")
    def work(order: str) -> str:
        """Do slow sync work."""
        time.sleep(sleep)
        return f"done {order}"

    async def model(state: S) -> dict[str, Any]:
        if state["messages"][-1].get("role") == "tool":
            return {"messages": [{"role": "assistant", "content": "ok"}]}
        call = {"id": "c1", "name": "work", "args": {"order": "o"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([work]))
    g.add_edge(START, "model")
    g.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].get("tool_calls") else END, ["tools", END]
    )
    g.add_edge("tools", "model")
    return g.compile(checkpointer=InMemoryCheckpointer(), sync_threads=sync_threads)


async def once(k: int, sleep: float, sync_threads: int | None) -> float:
    app = build(sleep, sync_threads)
    start = time.perf_counter()
    await asyncio.gather(
        *(app.ainvoke({"messages": [{"role": "user", "content": "go"}]}, {"thread_id": f"t{i}"})
          for i in range(k))
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--runs", default="6,12,24,48")
    args = parser.parse_args()
    for pool in (None, 6):
        for k in map(int, args.runs.split(",")):
            seconds = asyncio.run(once(k, args.sleep, pool))
            print(json.dumps({
                "workload": "sync-pool",
                "pool": "process (64)" if pool is None else f"sync_threads={pool}",
                "runs": k,
                "tool_sleep_s": args.sleep,
                "seconds": round(seconds, 3),
            }))


if __name__ == "__main__":
    main()

"""Does the Redis cache earn its place? Two measurements on PostgreSQL, with and without it.

1. ``write``: the tool loop (``oncegraph_bench.build``), N steps in one run, on a
   ``PgCheckpointer`` with ``redis_url=`` and without, in interleaved rounds: what the
   cache costs on the run path (every commit offers the new head to Redis).
2. ``read``: the head load under read load: ``reads`` calls of ``get_checkpoint(thread)``
   (what ``get_state`` does; the run path's ``Heads.load`` reads the thread row and then
   the head by id) over ``threads`` threads, ``concurrency`` at a time, with a warm cache
   (every lookup a verified hit) and without a cache. A hit still reads the thread row
   (the version check that makes the cache safe: guarantee 8, guarantee 15), so the cache can at
   best replace one primary-key read of the checkpoint row by one Redis GET plus an HMAC
   check.

    python benchmarks/cache_bench.py --n 200 --rounds 3 --reads 2000

Since the measurement the store no longer uses the cache, so on this tree both variants
run the same code (``cache_hits`` is -1). To repeat the measurement, run it against the
tree before the cache was taken out (commit 1bdb239)::

    mkdir /tmp/withcache && git archive 1bdb239 src | tar -x -C /tmp/withcache
    cd benchmarks && PYTHONPATH=/tmp/withcache/src python cache_bench.py

Prints one JSON line per measurement; each line names its variant (``redis`` / ``none``).
Keys go under a prefix of their own in ``BENCH_REDIS_URL`` (default the test database
15) and are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

from oncegraph_bench import _config, _input, _warm, build, fresh_pg_database

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


def _store(dsn: str, redis: bool, prefix: str) -> Any:
    from oncegraph.storage.checkpointer import PgCheckpointer

    if redis:
        return PgCheckpointer(postgres_dsn=dsn, redis_url=REDIS_URL, cache_prefix=prefix)
    return PgCheckpointer(postgres_dsn=dsn)


async def _drop_keys(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def write_once(n: int, redis: bool) -> float:
    prefix = f"bench-cache-{uuid.uuid4().hex[:8]}:"
    with fresh_pg_database() as dsn:
        store = _store(dsn, redis, prefix)
        try:
            await _warm(store)
            app = build(n).compile(checkpointer=store)
            start = time.perf_counter()
            await app.ainvoke(_input(n), _config(uuid.uuid4().hex, n))
            return (time.perf_counter() - start) / n * 1e6
        finally:
            await store.aclose()
            if redis:
                await _drop_keys(prefix)


async def read_once(reads: int, threads: int, concurrency: int, redis: bool) -> dict[str, Any]:
    prefix = f"bench-cache-{uuid.uuid4().hex[:8]}:"
    with fresh_pg_database() as dsn:
        store = _store(dsn, redis, prefix)
        try:
            app = build(2).compile(checkpointer=store)
            await app.setup()
            ids = [f"t{i}" for i in range(threads)]
            for tid in ids:  # each thread has a head (and the cache an entry for it)
                await app.ainvoke(_input(2), _config(tid, 2))
            for tid in ids:  # warm: the next lookups are hits
                assert await store.get_checkpoint(tid) is not None
            hits = _count_hits(store) if redis else [0]
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    await store.get_checkpoint(ids[i % threads])

            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(reads)))
            seconds = time.perf_counter() - start
            return {
                "us_per_read": round(seconds / reads * 1e6, 1),
                "reads_per_s": round(reads / seconds, 1),
                "cache_hits": hits[0],
            }
        finally:
            await store.aclose()
            if redis:
                await _drop_keys(prefix)


def _count_hits(store: Any) -> list[int]:
    """Count the head lookups the cache answered (verified and version-checked); -1 when
    the store has no cache read any more (this tree: see the module docstring)."""
    hits = [0]
    cached_head = getattr(store, "_cached_head", None)
    if cached_head is None:
        return [-1]

    async def counted(thread_id: str) -> Any:
        found = await cached_head(thread_id)
        hits[0] += found is not None
        return found

    store._cached_head = counted
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="tool-loop steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    per_step: dict[str, list[float]] = {"none": [], "redis": []}
    per_read: dict[str, list[dict[str, Any]]] = {"none": [], "redis": []}
    for _ in range(args.rounds):  # interleaved: a burst of load hits both alike
        for variant in ("none", "redis"):
            per_step[variant].append(asyncio.run(write_once(args.n, variant == "redis")))
        for variant in ("none", "redis"):
            per_read[variant].append(
                asyncio.run(
                    read_once(args.reads, args.threads, args.concurrency, variant == "redis")
                )
            )
    for variant in ("none", "redis"):
        print(
            json.dumps(
                {
                    "workload": "cache-write",
                    "variant": variant,
                    "n": args.n,
                    "us_per_step_median": round(statistics.median(per_step[variant]), 1),
                    "us_per_step": [round(x, 1) for x in per_step[variant]],
                }
            )
        )
    for variant in ("none", "redis"):
        rows = per_read[variant]
        print(
            json.dumps(
                {
                    "workload": "cache-read",
                    "variant": variant,
                    "reads": args.reads,
                    "threads": args.threads,
                    "concurrency": args.concurrency,
                    "us_per_read_median": statistics.median(r["us_per_read"] for r in rows),
                    "us_per_read": [r["us_per_read"] for r in rows],
                    "cache_hits": [r["cache_hits"] for r in rows],
                }
            )
        )


if __name__ == "__main__":
    main()

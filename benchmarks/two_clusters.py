"""A prototype of threads spread over two PostgreSQL clusters, measured on this machine.

This is a benchmark-side prototype, not a feature of the library: it shows the design in
``docs/scaling.md`` ("More than one PostgreSQL cluster") working on two real PostgreSQL
servers, and what it costs. It starts two fresh clusters of the installed PostgreSQL
(``initdb`` + ``pg_ctl``, as the ``postgres`` OS user, ports ``--ports``, identical
settings, ``fsync`` on), so the one-cluster and two-cluster figures compare like with like.

- **Routing.** A thread lives on one cluster: ``cluster_of(thread_id)`` takes the first 8
  bytes of SHA-256 of the id, modulo 64 virtual shards, and a table maps virtual shards to
  clusters (adding a cluster would move whole virtual shards). Each cluster has its own
  ``PgCheckpointer`` and its own compiled app; a run goes to its thread's cluster's app.
- **Workload.** ``--runs`` runs (2,000), one per thread, each one model turn and one
  recorded tool call (``oncegraph_bench.build(1)``), ``ainvoke`` at ``--concurrency`` (64)
  in ``--procs`` client processes (1 and 2), each taking every ``procs``-th thread: once
  with every thread on cluster A ("one cluster"), once routed over A and B ("two
  clusters"). Reported: runs/s, how the runs fell per cluster, WAL bytes written per
  cluster (``pg_current_wal_lsn`` before and after), and the checks: every run completed,
  one effect per run, and no thread's rows on both clusters.
- **The operator's cross-cluster listing.** The newest 50 runs of the app over both
  clusters: each cluster is asked for its newest page (concurrently) and the pages are
  merged by creation time (the next page goes on from each cluster's own last run).
  Median of 15 reads, next to one cluster's own page read the same way.

    python benchmarks/two_clusters.py                 # 2,000 runs, 1 and 2 client processes
    python benchmarks/two_clusters.py --runs 500 --procs 1

Each result is one JSON line on stdout. Timings are of this machine only: both clusters
and the clients share its cores, so the second cluster adds WAL and lock capacity, not CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import hashlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oncegraph_bench import EFFECTS, _config, _input, build

VSHARDS = 64


def cluster_of(thread_id: str, clusters: int) -> int:
    """The cluster a thread lives on: a stable hash of its id onto a virtual shard, and the
    shard's cluster (here shard modulo the cluster count; a real deployment keeps the
    shard-to-cluster table so that adding a cluster moves whole shards)."""
    shard = int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:8], "big") % VSHARDS
    return shard % clusters


# -- two fresh PostgreSQL clusters ---------------------------------------------------------


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise SystemExit(f"{name} not found under /usr/lib/postgresql: install PostgreSQL")
    return found[-1]


def _as_postgres(*cmd: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


@contextlib.contextmanager
def clusters(ports: Sequence[int]) -> Iterator[list[str]]:
    """Start one fresh cluster per port; yield their DSNs; stop and remove them."""
    root = Path(tempfile.mkdtemp(prefix="oncegraph_clusters_"))
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(root, "postgres")
    started: list[Path] = []
    try:
        dsns = []
        for port in ports:
            data = root / f"pg{port}"
            subprocess.run(
                _as_postgres(_pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            options = (
                f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=on "
                "-c synchronous_commit=on -c shared_buffers=128MB -c max_connections=200"
            )
            subprocess.run(
                _as_postgres(
                    _pg_bin("pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(root / f"pg{port}.log"),
                    "-w",
                    "start",
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            started.append(data)
            dsns.append(f"postgresql://postgres@127.0.0.1:{port}/postgres")
        yield dsns
    finally:
        for data in started:
            subprocess.run(
                _as_postgres(_pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "stop"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        shutil.rmtree(root, ignore_errors=True)


def _fresh_databases(dsns: Sequence[str], name: str) -> list[str]:
    import psycopg

    out = []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        out.append(dsn.rsplit("/", 1)[0] + "/" + name)
    return out


def _wal_lsn(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


# -- the clients ---------------------------------------------------------------------------


def _client(
    dsns: list[str], threads: list[str], concurrency: int, ready: Any, go: Any, out: Any
) -> None:
    asyncio.run(_client_runs(dsns, threads, concurrency, ready, go, out))


async def _client_runs(
    dsns: list[str], threads: list[str], concurrency: int, ready: Any, go: Any, out: Any
) -> None:
    from oncegraph.storage.checkpointer import PgCheckpointer

    stores = [PgCheckpointer(postgres_dsn=dsn) for dsn in dsns]
    apps = [build(1).compile(checkpointer=store) for store in stores]
    for i, app in enumerate(apps):  # schema and pool warm, outside the clock
        await app.ainvoke(_input(1), _config(f"warm-{os.getpid()}-{i}", 1))
    warm = len(EFFECTS)
    sem = asyncio.Semaphore(concurrency)

    async def one(thread: str) -> None:
        async with sem:
            await apps[cluster_of(thread, len(apps))].ainvoke(_input(1), _config(thread, 1))

    ready.put(os.getpid())
    await asyncio.to_thread(go.wait)
    start = time.perf_counter()
    await asyncio.gather(*(one(t) for t in threads))
    seconds = time.perf_counter() - start
    out.put({"pid": os.getpid(), "seconds": seconds, "effects": len(EFFECTS) - warm})
    for store in stores:
        await store.aclose()


def _run_clients(dsns: list[str], runs: int, procs: int, concurrency: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    threads = [f"thread-{i:06d}" for i in range(runs)]
    children = [
        ctx.Process(
            target=_client,
            args=(dsns, threads[p::procs], concurrency // procs, ready, go, out),
        )
        for p in range(procs)
    ]
    for child in children:
        child.start()
    for _ in children:  # every child has opened its stores and warmed up
        ready.get(timeout=300)
    wal_before = [_wal_lsn(dsn) for dsn in dsns]
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=1800) for _ in children]
    seconds = time.perf_counter() - start
    for child in children:
        child.join()
    wal = [_wal_lsn(dsn) - before for dsn, before in zip(dsns, wal_before, strict=True)]
    return {
        "seconds": seconds,
        "effects": sum(r["effects"] for r in results),
        "wal_bytes": wal,
        "slowest_client_s": max(r["seconds"] for r in results),
    }


# -- checks and the listing ----------------------------------------------------------------


def _thread_counts(dsns: Sequence[str]) -> tuple[list[int], list[int], int]:
    """Per cluster: completed runs of the workload's threads, runs not completed; and the
    threads found on more than one cluster."""
    import psycopg

    completed, unfinished, seen = [], [], []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT thread_id, status FROM oncegraph_runs WHERE thread_id LIKE 'thread-%'"
            ).fetchall()
        completed.append(sum(1 for _, s in rows if s == "completed"))
        unfinished.append(sum(1 for _, s in rows if s != "completed"))
        seen.append({t for t, _ in rows})
    both = len(set.intersection(*seen)) if len(seen) > 1 else 0
    return completed, unfinished, both


async def _listing(dsns: list[str], limit: int = 50, rounds: int = 15) -> dict[str, float]:
    from oncegraph.storage.checkpointer import PgCheckpointer

    stores = [PgCheckpointer(postgres_dsn=dsn) for dsn in dsns]
    apps = [build(1).compile(checkpointer=store) for store in stores]
    try:

        async def merged() -> list[Any]:
            pages = await asyncio.gather(*(app.aruns(limit=limit) for app in apps))
            rows = [r for page in pages for r in page]
            rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
            return rows[:limit]

        async def timed(read: Any) -> float:
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                page = await read()
                times.append(time.perf_counter() - start)
                assert len(page) == limit, len(page)
            return round(statistics.median(times) * 1e3, 2)

        await merged()  # warm
        return {
            "one_cluster_page_ms": await timed(lambda: apps[0].aruns(limit=limit)),
            "merged_page_ms": await timed(merged),
        }
    finally:
        for store in stores:
            await store.aclose()


def measure(cluster_dsns: list[str], runs: int, procs: int, concurrency: int) -> None:
    for layout, count in (("one_cluster", 1), ("two_clusters", 2)):
        name = f"two_clusters_{layout}_{procs}p_{os.getpid()}"
        dsns = _fresh_databases(cluster_dsns[:count], name)
        got = _run_clients(dsns, runs, procs, concurrency)
        completed, unfinished, both = _thread_counts(dsns)
        line: dict[str, Any] = {
            "workload": "two_clusters",
            "layout": layout,
            "runs": runs,
            "procs": procs,
            "concurrency": concurrency,
            "seconds": round(got["seconds"], 3),
            "runs_per_s": round(runs / got["seconds"], 1),
            "runs_per_cluster": completed,
            "wal_bytes_per_cluster": got["wal_bytes"],
            "wal_bytes_per_run": round(sum(got["wal_bytes"]) / runs, 1),
            "stranded": sum(unfinished) + runs - sum(completed),
            "twice": got["effects"] - runs,
            "threads_on_two_clusters": both,
        }
        if count == 2:
            line.update(asyncio.run(_listing(dsns)))
        line["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--procs", default="1,2", help="client processes, comma-separated")
    p.add_argument("--concurrency", type=int, default=64, help="in-flight runs, all clients")
    p.add_argument("--ports", default="5433,5434")
    args = p.parse_args(argv)
    ports = [int(x) for x in args.ports.split(",")]
    if len(ports) != 2:
        raise SystemExit("--ports takes two ports, one per cluster")
    with clusters(ports) as dsns:
        for procs in (int(x) for x in args.procs.split(",")):
            measure(dsns, args.runs, procs, args.concurrency)


if __name__ == "__main__":
    main()

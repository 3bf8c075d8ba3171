"""Shared plumbing for the peer benchmarks: arguments, fresh stores, one JSON line per result.

Each peer script runs in its own virtualenv (benchmarks/.venvs/<peer>), so this module uses
the standard library only, plus psycopg when a PostgreSQL database must be created.

Workload ("tool loop"): one run of N sequential steps; each step is one side-effecting tool
call (a trivial function) whose result the framework records durably before going on. The
clock covers the run alone: store creation, schema setup and a 2-step warm-up run on another
thread/workflow are outside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
STORES = ("sqlite", "postgres")


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("n", nargs="*", type=int, default=[10, 200, 1000], help="steps per run")
    parser.add_argument("--stores", default=",".join(STORES), help="sqlite,postgres")
    parser.add_argument("--shapes", default="", help="graph shapes to run (default: all)")
    args = parser.parse_args()
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.stores = [s for s in args.stores.split(",") if s]
    unknown = set(args.stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}; known: {STORES}")
    return args


def parse_threads_args(description: str, each: str) -> argparse.Namespace:
    """The many-threads peers' arguments: ``--runs`` (one ``each`` per run),
    ``--concurrency`` and ``--stores`` (comma-separated)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=1000, help=f"runs ({each})")
    parser.add_argument("--concurrency", default="1,8,64", help="concurrent runs")
    parser.add_argument("--stores", default=",".join(STORES), help="sqlite,postgres")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.stores = [s for s in args.stores.split(",") if s]
    unknown = set(args.stores) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}; known: {STORES}")
    return args


def pg_dsn() -> str:
    """The server to create benchmark databases on (URL form)."""
    return os.environ.get("BENCH_PG_DSN") or os.environ.get("ONCEGRAPH_TEST_PG_DSN") or DEFAULT_DSN


def _with_dbname(dsn: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path="/" + dbname))


@contextlib.contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """Create an empty database for one measurement; yield its URL; drop it afterwards."""
    import psycopg

    name = f"bench_{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(pg_dsn(), name)
    finally:
        with psycopg.connect(pg_dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def fresh_sqlite_file(prefix: str, *, wal: bool = True) -> Iterator[Path]:
    """A path in a new temporary folder; with ``wal`` the file is created in WAL mode
    (a persistent property of the database file, so every later connection uses it)."""
    with tempfile.TemporaryDirectory(prefix=f"bench_{prefix}_") as folder:
        path = Path(folder) / "bench.sqlite"
        if wal:
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()
        yield path


def sqlite_pragmas(path: Path) -> dict[str, Any]:
    """What a fresh connection to ``path`` sees (synchronous 2 = FULL, 1 = NORMAL)."""
    conn = sqlite3.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        conn.close()
    return {"journal_mode": mode, "synchronous": sync}


def timed(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def emit(peer: str, store: str, n: int, seconds: float, version: str, **extra: Any) -> None:
    """Print one result line."""
    line = {
        "peer": peer,
        "store": store,
        "n": n,
        "seconds": round(seconds, 6),
        "us_per_step": round(seconds / n * 1e6, 1),
        "steps_per_s": round(n / seconds, 1),
        "version": version,
        **extra,
    }
    print(json.dumps(line), flush=True)


def emit_threads(
    peer: str, store: str, runs: int, seconds: float, version: str, concurrency: int, **extra: Any
) -> None:
    """One many-threads result (``peer`` is its own name: the tool-loop table keys on peer
    and N)."""
    emit(
        peer,
        store,
        runs,
        seconds,
        version,
        workload="threads",
        concurrency=concurrency,
        runs_per_s=round(runs / seconds, 1),
        **extra,
    )


def note(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)

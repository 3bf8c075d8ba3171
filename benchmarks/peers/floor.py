"""The floor: what one durable write costs with no framework at all.

N times: insert one row, commit. SQLite in WAL mode with synchronous=FULL; PostgreSQL via
psycopg with autocommit off and one commit per row (the server's fsync settings as they
are). Reports the total and the median microseconds per insert + commit.

    python benchmarks/peers/floor.py 10 200 1000 [--stores sqlite,postgres]
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from importlib.metadata import version

from _common import emit, fresh_pg_database, fresh_sqlite_file, parse_args, sqlite_pragmas

PAYLOAD = '{"tool": "record_effect", "result": "done"}'


def _run(n: int, insert_commit: object) -> tuple[float, list[float]]:
    laps: list[float] = []
    total_start = time.perf_counter()
    for i in range(n):
        start = time.perf_counter()
        insert_commit(i)  # type: ignore[operator]
        laps.append(time.perf_counter() - start)
    return time.perf_counter() - total_start, laps


def bench_sqlite(n: int) -> None:
    with fresh_sqlite_file("floor") as path:
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, step INTEGER, body TEXT)")
        conn.commit()

        def insert_commit(i: int) -> None:
            conn.execute("INSERT INTO effects (step, body) VALUES (?, ?)", (i, PAYLOAD))
            conn.commit()

        seconds, laps = _run(n, insert_commit)
        pragmas = {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
        }
        conn.close()
        assert sqlite_pragmas(path)["journal_mode"] == "wal"
    emit(
        "floor",
        "sqlite",
        n,
        seconds,
        sqlite3.sqlite_version,
        median_us_per_commit=round(statistics.median(laps) * 1e6, 1),
        sqlite=pragmas,
    )


def bench_postgres(n: int) -> None:
    import psycopg

    with fresh_pg_database("floor") as dsn, psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute("CREATE TABLE effects (id bigserial PRIMARY KEY, step int, body jsonb)")
        conn.commit()
        fsync = conn.execute("SHOW fsync").fetchone()[0]  # type: ignore[index]
        sync_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
        server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        conn.commit()

        def insert_commit(i: int) -> None:
            conn.execute("INSERT INTO effects (step, body) VALUES (%s, %s)", (i, PAYLOAD))
            conn.commit()

        seconds, laps = _run(n, insert_commit)
    emit(
        "floor",
        "postgres",
        n,
        seconds,
        f"psycopg {version('psycopg')}, server {server}",
        median_us_per_commit=round(statistics.median(laps) * 1e6, 1),
        postgres={"fsync": fsync, "synchronous_commit": sync_commit},
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    for store in args.stores:
        for n in args.n:
            (bench_sqlite if store == "sqlite" else bench_postgres)(n)


if __name__ == "__main__":
    main()

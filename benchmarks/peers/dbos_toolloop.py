"""DBOS on the tool-loop workload: one workflow calling a ``@DBOS.step`` N times.

DBOS records each step's output in its system database before the workflow goes on. The
system database is a SQLite file (created in WAL mode; connections keep SQLite's default
synchronous=FULL, which DBOS does not change) or a fresh PostgreSQL database.

    benchmarks/.venvs/dbos/bin/python benchmarks/peers/dbos_toolloop.py 10 200 1000
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

from _common import emit, fresh_pg_database, fresh_sqlite_file, parse_args, sqlite_pragmas, timed
from dbos import DBOS, SetWorkflowID

EFFECTS: list[int] = []


@DBOS.step()
def record_effect(i: int) -> str:
    EFFECTS.append(i)  # the side effect: a trivial function
    return f"done {i}"


@DBOS.workflow()
def toolloop(n: int) -> str:
    result = ""
    for i in range(n):
        result = record_effect(i)
    return result


@contextlib.contextmanager
def system_database(store: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if store == "sqlite":
        with fresh_sqlite_file("dbos") as path:
            yield f"sqlite:///{path}", {"sqlite": sqlite_pragmas(path)}
    else:
        with fresh_pg_database("dbos") as dsn:
            yield dsn, {}


def measure(store: str, n: int) -> None:
    with system_database(store) as (url, info):
        DBOS(config={"name": "bench-toolloop", "system_database_url": url, "log_level": "ERROR"})
        DBOS.launch()
        try:
            toolloop(2)  # warm-up
            before = len(EFFECTS)
            with SetWorkflowID(uuid.uuid4().hex):
                seconds = timed(lambda: toolloop(n))
            assert len(EFFECTS) - before == n, "every step must perform exactly one effect"
        finally:
            DBOS.destroy()
    emit("dbos", store, n, seconds, f"dbos {version('dbos')}", **info)


def main() -> None:
    args = parse_args(__doc__ or "")
    logging.getLogger("dbos").setLevel(logging.ERROR)
    for store in args.stores:
        for n in args.n:
            measure(store, n)


if __name__ == "__main__":
    main()

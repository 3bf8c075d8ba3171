"""DBOS on the tool-loop workload, in two shapes.

- ``agent`` (peer ``dbos-agent``, equal work): what an agent on DBOS records per iteration,
  the same as oncegraph's step: a model-turn step (a scripted assistant message asking for
  one tool call, as oncegraph's and LangGraph's scripted model node) and then the tool call
  as a second step. Two recorded steps per iteration.
- ``one-step`` (peer ``dbos``, a lower bound): one ``@DBOS.step`` per iteration, the tool
  call only; no model turn is recorded, so it is LESS work than a step of the others.

DBOS records each step's output in its system database before the workflow goes on. The
system database is a SQLite file (created in WAL mode; connections keep SQLite's default
synchronous=FULL, which DBOS does not change) or a fresh PostgreSQL database.

    benchmarks/.venvs/dbos/bin/python benchmarks/peers/dbos_toolloop.py 10 200 1000
    benchmarks/.venvs/dbos/bin/python benchmarks/peers/dbos_toolloop.py 200 --shapes agent
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


@DBOS.step()
def model_turn(i: int) -> dict[str, Any]:
    # a scripted model: the assistant message asking for the next tool call
    call = {"id": f"call-{i}", "name": "record_effect", "args": {"i": i}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@DBOS.workflow()
def toolloop(n: int) -> str:
    result = ""
    for i in range(n):
        result = record_effect(i)
    return result


@DBOS.workflow()
def agent_loop(n: int) -> str:
    result = ""
    for i in range(n):
        message = model_turn(i)
        result = record_effect(message["tool_calls"][0]["args"]["i"])
    return result


SHAPES = {"one-step": ("dbos", toolloop, 1), "agent": ("dbos-agent", agent_loop, 2)}


@contextlib.contextmanager
def system_database(store: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if store == "sqlite":
        with fresh_sqlite_file("dbos") as path:
            yield f"sqlite:///{path}", {"sqlite": sqlite_pragmas(path)}
    else:
        with fresh_pg_database("dbos") as dsn:
            yield dsn, {}


def measure(store: str, n: int, shape: str) -> None:
    peer, workflow, steps = SHAPES[shape]
    with system_database(store) as (url, info):
        DBOS(config={"name": "bench-toolloop", "system_database_url": url, "log_level": "ERROR"})
        DBOS.launch()
        try:
            workflow(2)  # warm-up
            before = len(EFFECTS)
            with SetWorkflowID(uuid.uuid4().hex):
                seconds = timed(lambda: workflow(n))
            assert len(EFFECTS) - before == n, "every step must perform exactly one effect"
        finally:
            DBOS.destroy()
    emit(
        peer,
        store,
        n,
        seconds,
        f"dbos {version('dbos')}",
        shape=shape,
        recorded_steps_per_iteration=steps,
        **info,
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    unknown = set(args.shapes) - set(SHAPES)
    if unknown:
        raise SystemExit(f"unknown shapes {sorted(unknown)}; known: {sorted(SHAPES)}")
    logging.getLogger("dbos").setLevel(logging.ERROR)
    for store in args.stores:
        for n in args.n:
            for shape in args.shapes or SHAPES:
                measure(store, n, shape)


if __name__ == "__main__":
    main()

"""A worker for the recorded-facts crash tests: one node that draws an id and a time,
optionally sends them through ``effect()``, in its own OS process.

Usage::

    python _facts_worker.py <sqlite file | pg:DSN> <calls log> <send|plain> <start|resume>

Node ``order`` draws ``oncegraph.uuid4()`` and ``oncegraph.now()``; with ``send`` it then
makes a ``write`` effect whose request carries both (each call of its body appends one
JSON line to the calls log, fsynced, before returning). ``start`` invokes with new input,
``resume`` continues with ``None``. The final values and the run's recorded facts are
printed as one JSON line. ``ONCEGRAPH_CRASH_AT`` makes oncegraph kill the process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TypedDict

import oncegraph
from oncegraph import END, START, StateGraph, effect
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

THREAD = {"thread_id": "facts-thread"}


class State(TypedDict, total=False):
    order: str
    at: str
    sent: str


def main(argv: list[str]) -> int:
    where, calls, kind, action = argv[1:5]

    def send(order: str, at: str) -> str:
        fd = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps({"order": order, "at": at}) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"sent {order}"

    def order(state: State) -> dict[str, Any]:
        oid, at = str(oncegraph.uuid4()), oncegraph.now().isoformat()
        out = {"order": oid, "at": at}
        if kind == "send":
            out["sent"] = effect(send, oid, at, effect_type="send_order")
        return out

    g = StateGraph(State)
    g.add_node("order", order)
    g.add_edge(START, "order")
    g.add_edge("order", END)
    store = (
        PgCheckpointer(postgres_dsn=where[3:])
        if where.startswith("pg:")
        else SqliteCheckpointer(where)
    )
    app = g.compile(checkpointer=store)
    values = app.invoke({} if action == "start" else None, THREAD)
    facts = [
        e.result
        for e in app.effects(thread_id="facts-thread")
        if e.effect_type == "oncegraph.facts"
    ]
    print(json.dumps({"values": values, "facts": facts, "store": type(store).__name__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

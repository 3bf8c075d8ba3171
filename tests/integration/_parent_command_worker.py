"""A worker program for the parent-command kill test: a subgraph's node charges (an
effect) and returns ``Command(graph=Command.PARENT, goto="receipt")``.

Usage::

    python _parent_command_worker.py <db path> <work dir> <invoke|stream> <start|resume>
        [stateful]

The parent runs ``sub`` (the subgraph ``first -> pay``; ``stateful``: compiled with
``checkpointer=True``), whose ``pay`` routes the parent to ``receipt``. The charge
appends a line to ``<work dir>/charges.log`` (flushed and fsynced, so a SIGKILL loses
nothing written before it): that file is the provider's side. ``start`` invokes with
new input, ``resume`` continues with ``None``; on success the final values are printed
as one JSON line. ``ONCEGRAPH_CRASH_AT`` makes oncegraph kill the process at a point.
"""

from __future__ import annotations

import json
import operator
import os
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from oncegraph import START, Command, StateGraph, effect
from oncegraph.storage.checkpointer import SqliteCheckpointer

THREAD = {"thread_id": "parent-command-thread"}


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def build(db: Path, workdir: Path, stateful: bool) -> Any:
    def charge(to: str) -> str:
        fd = os.open(workdir / "charges.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"charged {to}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"charged {to}"

    def pay(state: State) -> Command[Any]:
        return Command(
            graph=Command.PARENT, goto="receipt", update={"log": [effect(charge, "ada")]}
        )

    child = StateGraph(State)
    child.add_node("first", lambda s: {"log": ["child first"]})
    child.add_node("pay", pay)
    child.add_edge(START, "first")
    child.add_edge("first", "pay")

    parent = StateGraph(State, name="parent-command-kill")
    parent.add_node("sub", child.compile(checkpointer=True if stateful else None))
    parent.add_node("receipt", lambda s: {"log": ["receipt"]})
    parent.add_edge(START, "sub")
    return parent.compile(checkpointer=SqliteCheckpointer(db))


def main(argv: list[str]) -> int:
    db, workdir, path, action = Path(argv[1]), Path(argv[2]), argv[3], argv[4]
    app = build(db, workdir, stateful=argv[5:] == ["stateful"])
    inp = {"log": ["in"]} if action == "start" else None
    if path == "invoke":
        values = app.invoke(inp, THREAD)
    else:
        values = list(app.stream(inp, THREAD, stream_mode="values"))[-1]
    print(json.dumps(values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

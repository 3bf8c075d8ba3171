"""A worker program for the process-kill tests: runs a three-node graph on a SQLite file.

Usage::

    python _node_worker.py <db path> <work dir> <invoke|stream> <start|resume>

The graph is ``first -> middle -> last``; every node appends a message. Each node
appends a line to ``<work dir>/executions.log`` (opened in append mode, flushed and
fsynced, so a SIGKILL loses nothing written before it): ``first``, ``middle:start``,
``middle:end``, ``last``. While ``<work dir>/hang`` exists, ``middle`` writes
``<work dir>/middle.marker`` (its pid) after ``middle:start`` and sleeps, so the test
can kill the process in the middle of the node. ``start`` invokes with new input,
``resume`` continues with ``None``. On success the final values are printed as one JSON
line on stdout. ``ONCEGRAPH_CRASH_AT`` in the environment makes oncegraph kill the
process itself at a named point.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from oncegraph import START, StateGraph, add_messages
from oncegraph.storage.checkpointer import SqliteCheckpointer

THREAD = {"thread_id": "killed-thread"}


class State(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    seen: int


def _record(workdir: Path, line: str) -> None:
    fd = os.open(workdir / "executions.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def build(db: Path, workdir: Path) -> Any:
    def first(state: State) -> dict[str, Any]:
        _record(workdir, "first")
        return {"messages": [("assistant", "first")], "seen": len(state["messages"])}

    def middle(state: State) -> dict[str, Any]:
        _record(workdir, "middle:start")
        if (workdir / "hang").exists():
            marker = workdir / "middle.marker"
            tmp = marker.with_suffix(".tmp")
            tmp.write_text(str(os.getpid()))
            tmp.replace(marker)  # atomic: the test never reads a half-written marker
            time.sleep(60)
        _record(workdir, "middle:end")
        return {"messages": [("assistant", "middle")], "seen": len(state["messages"])}

    async def last(state: State) -> dict[str, Any]:
        _record(workdir, "last")
        return {"messages": [("assistant", "last")], "seen": len(state["messages"])}

    g = StateGraph(State, name="kill-test")
    g.add_node("first", first)
    g.add_node("middle", middle)
    g.add_node("last", last)
    g.add_edge(START, "first")
    g.add_edge("first", "middle")
    g.add_edge("middle", "last")
    return g.compile(checkpointer=SqliteCheckpointer(db))


def main(argv: list[str]) -> int:
    db, workdir, path, action = Path(argv[1]), Path(argv[2]), argv[3], argv[4]
    app = build(db, workdir)
    inp = {"messages": ["hello"]} if action == "start" else None
    if path == "invoke":
        values = app.invoke(inp, THREAD)
    elif path == "stream":
        events = list(app.stream(inp, THREAD, stream_mode="values"))
        values = events[-1]  # the last "values" event is the final state
    else:
        raise SystemExit(f"unknown path {path!r}")
    print(json.dumps(values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

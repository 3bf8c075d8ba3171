"""One step of ``test_answer_updates.py``'s crash test, in a process of its own.

``python _answer_update_worker.py sqlite|postgres <file | dsn> <step>``:

* ``start``: a run that asks its first question;
* ``answer``: answers it with ``Command(resume=..., update=...)``; the resumed node
  SIGKILLs this process before it asks again (the answer and its update are stored,
  the step is not);
* ``continue``: ``invoke(None)`` goes on with the crashed run; prints the state;
* ``finish``: answers the second question; prints the state.
"""

from __future__ import annotations

import operator
import os
import signal
import sys
from typing import Annotated, Any, TypedDict

from oncegraph import START, Command, StateGraph, interrupt
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer


class S(TypedDict):
    my_key: Annotated[str, operator.add]


def main(kind: str, where: str, step: str) -> None:
    def node(s: S) -> dict[str, Any]:
        a = interrupt({"value": 1})
        if step == "answer":
            os.kill(os.getpid(), signal.SIGKILL)
        b = interrupt({"value": 2})
        return {"my_key": a + " " + b}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    store = PgCheckpointer(where) if kind == "postgres" else SqliteCheckpointer(where)
    app = g.compile(checkpointer=store)
    t = {"configurable": {"thread_id": "t"}}
    if step == "start":
        app.invoke({"my_key": "DE"}, t)
    elif step == "answer":
        app.invoke(Command(resume="answer 1", update={"my_key": " foofoo "}), t)
    elif step == "continue":
        app.invoke(None, t)
    elif step == "finish":
        app.invoke(Command(resume="answer 2"), t)
    print(app.get_state(t).values)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])

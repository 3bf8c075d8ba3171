"""LangGraph on the tool-loop workload.

Two shapes, each compiled with SqliteSaver (WAL, synchronous=FULL) and PostgresSaver (a fresh
database per measurement), invoked with ``durability="sync"`` so each checkpoint is written
before the next step runs:

- ``toolnode``: StateGraph over MessagesState, a scripted model node that emits one tool call
  per turn and prebuilt ``ToolNode`` (a step = one model turn + one tool call);
- ``node-loop``: one node that calls the tool and loops to itself until N.

    benchmarks/.venvs/langgraph/bin/python benchmarks/peers/langgraph_toolloop.py 10 200 1000
    benchmarks/.venvs/langgraph/bin/python benchmarks/peers/langgraph_toolloop.py 200 \
        --shapes toolnode
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Annotated, Any, TypedDict

from _common import emit, fresh_pg_database, fresh_sqlite_file, parse_args, sqlite_pragmas, timed
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

EFFECTS: list[int] = []


def _effect(i: int) -> str:
    EFFECTS.append(i)  # the side effect: a trivial function
    return f"done {i}"


@tool
def record_effect(i: int) -> str:
    """Perform one side effect."""
    return _effect(i)


def toolnode_graph(n: int) -> StateGraph:
    def model(state: MessagesState) -> dict[str, Any]:
        done = (len(state["messages"]) - 1) // 2  # human, then (ai, tool) pairs
        if done >= n:
            return {"messages": [AIMessage(content="finished")]}
        call = {"name": "record_effect", "args": {"i": done}, "id": f"call_{done}"}
        return {"messages": [AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([record_effect]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph


class LoopState(TypedDict):
    n: int
    i: int
    results: Annotated[list[str], operator.add]


def node_loop_graph(n: int) -> StateGraph:
    def step(state: LoopState) -> dict[str, Any]:
        return {"i": state["i"] + 1, "results": [_effect(state["i"])]}

    graph = StateGraph(LoopState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: END if s["i"] >= s["n"] else "step")
    return graph


def _invoke_kwargs(app: Any) -> dict[str, Any]:
    """``durability="sync"`` where the installed version has it, else checkpoint_during."""
    if "durability" in inspect.signature(app.invoke).parameters:
        return {"durability": "sync"}
    return {"checkpoint_during": True}


def _input(shape: str, n: int) -> dict[str, Any]:
    if shape == "toolnode":
        return {"messages": [HumanMessage(content=f"do {n} things")]}
    return {"n": n, "i": 0, "results": []}


@contextlib.contextmanager
def saver_for(store: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    if store == "sqlite":
        with fresh_sqlite_file("langgraph") as path:
            conn = sqlite3.connect(path, check_same_thread=False)
            conn.execute("PRAGMA synchronous=FULL")
            saver = SqliteSaver(conn)
            saver.setup()
            try:
                yield saver, {"sqlite": sqlite_pragmas(path)}
            finally:
                conn.close()
    else:
        with fresh_pg_database("langgraph") as dsn, PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            yield saver, {}


def _count_checkpoints(saver: Any, thread_id: str) -> int:
    """By SQL: ``saver.list`` would load (and decode) every checkpoint, O(N^2) in all."""
    if isinstance(saver, SqliteSaver):
        sql = "SELECT count(*) FROM checkpoints WHERE thread_id = ?"
        return int(saver.conn.execute(sql, (thread_id,)).fetchone()[0])
    sql = "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s"
    return int(saver.conn.execute(sql, (thread_id,)).fetchone()["n"])


def measure(shape: str, build: Callable[[int], StateGraph], store: str, n: int) -> None:
    with saver_for(store) as (saver, info):
        warm = build(2).compile(checkpointer=saver)
        kwargs = _invoke_kwargs(warm)
        warm.invoke(
            _input(shape, 2),
            {"configurable": {"thread_id": "warmup"}, "recursion_limit": 20},
            **kwargs,
        )
        app = build(n).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 2 * n + 10}
        before = len(EFFECTS)
        seconds = timed(lambda: app.invoke(_input(shape, n), config, **kwargs))
        assert len(EFFECTS) - before == n, "every step must perform exactly one effect"
        checkpoints = _count_checkpoints(saver, config["configurable"]["thread_id"])
    emit(
        f"langgraph-{shape}",
        store,
        n,
        seconds,
        f"langgraph {version('langgraph')}",
        invoke=kwargs,
        checkpoints=checkpoints,
        **info,
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    for shape, build in (("toolnode", toolnode_graph), ("node-loop", node_loop_graph)):
        if args.shapes and shape not in args.shapes:
            continue
        for store in args.stores:
            for n in args.n:
                measure(shape, build, store, n)


if __name__ == "__main__":
    main()

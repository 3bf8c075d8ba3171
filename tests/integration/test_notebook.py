"""Notebooks: ``invoke`` and ``stream`` in a REAL Jupyter kernel (ipykernel, driven by
jupyter_client), where every cell already runs inside the kernel's event loop.

A cell builds a small graph on a SQLite file and calls the sync API; another mixes
``await app.ainvoke`` (the store opens a pool on the kernel's loop) with ``app.invoke``
(the portal's loop gets its own) on PostgreSQL, and closes the store from the cell.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"
PG_DSN = os.environ.get("ONCEGRAPH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
CELL_TIMEOUT = 300.0  # seconds; a hang detector for a loaded machine

GRAPH_CELL = """
import asyncio, json, operator
from typing import Annotated, TypedDict
from oncegraph import StateGraph, START, END, add_messages

print("LOOP", asyncio.get_running_loop() is not None)  # the reason invoke was refused

class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    steps: Annotated[list[str], operator.add]

def think(state):
    about = state["messages"][-1].content
    return {"steps": ["think"], "messages": [("assistant", "thinking about " + about)]}

async def answer(state):
    await asyncio.sleep(0)
    return {"steps": ["answer"], "messages": [("assistant", "42")]}

g = StateGraph(State)
g.add_sequence([think, answer])
g.add_edge(START, "think")
g.add_edge("answer", END)
"""


class Kernel:
    """A started kernel and a way to run a cell and get its stdout and errors."""

    def __init__(self, manager: Any, client: Any) -> None:
        self.manager = manager
        self.client = client

    def run(self, code: str) -> str:
        out: list[str] = []
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                errors.append("\n".join(msg["content"]["traceback"]))

        reply = self.client.execute_interactive(
            textwrap.dedent(code), timeout=CELL_TIMEOUT, output_hook=hook
        )
        assert reply["content"]["status"] == "ok", "\n".join(errors) or reply["content"]
        return "".join(out)


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=120, env=env)
    try:
        yield Kernel(manager, client)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _lines(output: str, prefix: str) -> list[Any]:
    return [
        json.loads(line[len(prefix) :]) for line in output.splitlines() if line.startswith(prefix)
    ]


def test_invoke_and_stream_in_a_jupyter_cell(kernel: Kernel, tmp_path: Path) -> None:
    db = tmp_path / "notebook.db"
    out = kernel.run(GRAPH_CELL)
    assert "LOOP True" in out

    out = kernel.run(
        f"""
        from oncegraph.storage.checkpointer import SqliteCheckpointer
        app = g.compile(checkpointer=SqliteCheckpointer({str(db)!r}))
        cfg = {{"thread_id": "nb"}}
        result = app.invoke({{"messages": ["the answer?"]}}, cfg)
        print("INVOKE", json.dumps([m.content for m in result["messages"]]))
        for chunk in app.stream({{"messages": ["again?"]}}, cfg, stream_mode="updates"):
            print("CHUNK", json.dumps(sorted(chunk)))
        print("STATE", json.dumps(app.get_state(cfg).values["steps"]))
        """
    )
    assert _lines(out, "INVOKE ") == [["the answer?", "thinking about the answer?", "42"]]
    assert _lines(out, "CHUNK ") == [["think"], ["answer"]]  # LangGraph: no __start__ chunk
    assert _lines(out, "STATE ") == [["think", "answer", "think", "answer"]]

    # The kernel's own loop is still usable, and a nested invoke from an async node
    # (which runs on the portal's loop) is refused with a clear message.
    out = kernel.run(
        """
        print("AWAIT", json.dumps(len((await app.ainvoke({"messages": ["async"]}, cfg))["steps"])))

        async def nested(state):
            app.invoke({"messages": ["inner"]}, {"thread_id": "inner"})
            return {}

        g2 = StateGraph(State)
        g2.add_node("nested", nested)
        g2.add_edge(START, "nested")
        try:
            g2.compile().invoke({"messages": ["x"]})
        except Exception as exc:
            print("REFUSED", json.dumps(type(exc).__name__ + ": " + str(exc)))
        """
    )
    assert _lines(out, "AWAIT ") == [6]
    (refused,) = _lines(out, "REFUSED ")
    assert refused.startswith("ConfigError: invoke() was called from oncegraph's own event loop")


@pytest.mark.postgres
def test_a_loop_bound_store_serves_the_kernel_loop_and_the_sync_api(
    kernel: Kernel, request: pytest.FixtureRequest
) -> None:
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.connect(PG_DSN, connect_timeout=10).close()
    except psycopg.Error as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
        pytest.skip(f"PostgreSQL unreachable ({exc})")
    import uuid

    from psycopg.conninfo import make_conninfo

    name = "og_nb_" + uuid.uuid4().hex[:16]
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    request.addfinalizer(drop)
    dsn = make_conninfo(PG_DSN, dbname=name)
    kernel.run(GRAPH_CELL)
    out = kernel.run(
        f"""
        from oncegraph.storage.checkpointer import PgCheckpointer
        store = PgCheckpointer({dsn!r})
        app = g.compile(checkpointer=store)
        cfg = {{"thread_id": "nb"}}
        first = await app.ainvoke({{"messages": ["one"]}}, cfg)   # a pool on the kernel loop
        second = app.invoke({{"messages": ["two"]}}, cfg)         # a pool on the portal loop
        third = await app.ainvoke({{"messages": ["three"]}}, cfg) # the kernel loop's pool again
        print("STEPS", json.dumps([len(first["steps"]), len(second["steps"]), len(third["steps"])]))
        print("POOLS", len(store._pools))
        await store.aclose()  # closes the portal loop's pool through its thread
        print("POOLS", len(store._pools))
        print("AFTER", json.dumps(len(app.invoke({{"messages": ["four"]}}, cfg)["steps"])))
        await store.aclose()
        """
    )
    assert _lines(out, "STEPS ") == [[2, 4, 6]]
    assert _lines(out, "POOLS ") == [2, 0]
    assert _lines(out, "AFTER ") == [8]

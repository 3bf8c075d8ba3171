"""Guarantee 12: corrupt rows and a full disk give clear errors, change nothing, re-run nothing.

Each case corrupts one row of a real store with SQL (SQLite and PostgreSQL), then drives
the app down a read path (``get_state``, ``effects``) and the resume path. Every error is
a ``CorruptRecordError`` (a ``StorageError``) naming the table, the row, its thread and
its run; the row is still there, unchanged; and no tool body ran again.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from oncegraph import FaultPlan, effect, tool
from oncegraph.errors import (
    CorruptRecordError,
    LedgerUnavailableError,
    StorageError,
    _CrashSignal,
)
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer

T = "t-corrupt"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}


class World:
    def __init__(self, backend: str, where: str) -> None:
        self.backend, self.where = backend, where
        self.bodies: list[str] = []

    def store(self) -> Checkpointer:
        if self.backend == "postgres":
            return PgCheckpointer(self.where)
        return SqliteCheckpointer(self.where)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.backend == "postgres":
            with psycopg.connect(self.where, autocommit=True) as conn:
                cur = conn.execute(statement.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.where, isolation_level=None)
        try:
            return conn.execute(statement, params).fetchall()
        finally:
            conn.close()

    def app(self, store: Checkpointer | None = None) -> Any:
        bodies = self.bodies

        @tool(dedup="test double: its calls are counted")
        def refund(order_id: str) -> str:
            """Refund an order."""
            bodies.append(order_id)
            return "refunded"

        call = {"id": "c1", "name": "refund", "args": {"order_id": "1042"}}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "done")
        return ReactAgent(model=model, tools=[refund]).compile(checkpointer=store or self.store())

    def crashed_run(self, point: str = "before_checkpoint", nth: int = 2) -> Any:
        """A run stopped in its tools step (in-process fault); returns the app."""
        app = self.app()
        with pytest.raises(_CrashSignal):
            app.invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(point, nth)})
        return app

    def head(self) -> tuple[str]:
        (row,) = self.sql(
            "SELECT head_checkpoint_id FROM oncegraph_threads WHERE thread_id = ?", (T,)
        )
        return (str(row[0]),)

    def values(self, head: tuple[str]) -> list[tuple[Any, ...]]:
        return self.sql(
            "SELECT channel_values FROM oncegraph_checkpoints WHERE checkpoint_id = ?", head
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    if request.param == "postgres":
        yield World("postgres", str(request.getfixturevalue("fresh_dsn")))
    else:
        yield World("sqlite", str(tmp_path / "corrupt.db"))


def _named(error: BaseException, *parts: str) -> None:
    """The error names every part, and says nothing was changed or re-run."""
    text = str(error)
    for part in parts:
        assert part in text, f"{part!r} not in: {text}"
    assert "left untouched" in text and "nothing was re-executed" in text


def test_checkpoint_of_the_wrong_shape(world: World) -> None:
    app = world.crashed_run()
    run = app.runs(thread_id=T)[0]
    head = world.head()
    world.sql(
        "UPDATE oncegraph_checkpoints SET channel_values = ? WHERE checkpoint_id = ?",
        ("[1, 2]", *head),
    )
    before = world.values(head)
    bodies = len(world.bodies)
    fresh = world.app()  # a new process's view: no cached head
    for attempt in (
        lambda: fresh.get_state({"thread_id": T}),
        lambda: fresh.invoke(None, {"thread_id": T}),
    ):
        with pytest.raises(CorruptRecordError) as caught:
            attempt()
        assert isinstance(caught.value, StorageError)
        _named(caught.value, "oncegraph_checkpoints", head[0], T, run.run_id, "channel_values")
    assert world.values(head) == before
    assert len(world.bodies) == bodies


def test_unknown_next_node(world: World) -> None:
    app = world.crashed_run()
    run = app.runs(thread_id=T)[0]
    world.sql(
        "UPDATE oncegraph_checkpoints SET next_nodes = ? WHERE checkpoint_id = ?",
        ('["no_such_node"]', *world.head()),
    )
    bodies = len(world.bodies)
    with pytest.raises(CorruptRecordError) as caught:
        world.app().invoke(None, {"thread_id": T})
    _named(caught.value, "no_such_node", T, run.run_id)
    assert len(world.bodies) == bodies


def test_corrupt_log_entry(world: World) -> None:
    world.crashed_run()
    world.sql("UPDATE oncegraph_log SET value = '{not json' WHERE thread_id = ? AND seq = 0", (T,))
    with pytest.raises(CorruptRecordError) as caught:
        world.app().get_state({"thread_id": T})
    _named(caught.value, "oncegraph_log", "messages#0", T)


def test_corrupt_effect_row(world: World) -> None:
    app = world.crashed_run()
    run = app.runs(thread_id=T)[0]
    world.sql("UPDATE oncegraph_effects SET attempts = ? WHERE effect_type = ?", ("{}", "refund"))
    bodies = len(world.bodies)
    for attempt in (
        lambda: app.effects(thread_id=T),
        lambda: world.app().invoke(None, {"thread_id": T}),
    ):
        with pytest.raises(StorageError) as caught:
            attempt()
        _named(caught.value, "oncegraph_effects", T, run.run_id)
    assert len(world.bodies) == bodies


def test_full_disk_before_a_tool_call_says_the_tool_did_not_run(tmp_path: Path) -> None:
    from typing import TypedDict

    from oncegraph import END, START, StateGraph

    class S(TypedDict, total=False):
        out: str

    sent: list[int] = []

    def charge(payload: str) -> str:
        sent.append(len(payload))
        return "charged"

    def node(state: S) -> S:
        return {"out": effect(charge, "x" * 400_000)}  # its intent needs pages the disk lacks

    g = StateGraph(S)
    g.add_node("pay", node)
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    store = SqliteCheckpointer(tmp_path / "full.db")
    asyncio.run(store.setup())
    assert store._conn is not None
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 8}")  # room for the small steps
    app = g.compile(checkpointer=store)
    with pytest.raises(LedgerUnavailableError) as caught:
        app.invoke({}, {"thread_id": T})
    assert "full" in str(caught.value) and "did NOT run" in str(caught.value)
    assert sent == []

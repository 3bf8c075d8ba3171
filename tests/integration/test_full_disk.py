"""A full disk says what did and did not happen, and what to do.

The database lives on a real, tiny tmpfs (SQLite: its file; PostgreSQL: a tablespace
holding every oncegraph table and index, the WAL staying on the server's own disk, as an
operator's data volume fills up). The disk is filled at one moment of a run: before it
starts, while its model-like node decides a tool call (the call's intent rides that
step's commit), and inside the tool after the payment provider charged (its result rides
the tools step's commit). Each time the error is a ``StorageFullError`` (HTTP 503) that
says whether the run exists, which tool ran and which did not, and that freeing space and
resuming (or starting again) finishes the work: after freeing space, every order is
charged exactly once. A failed insert is never reported as "run does not exist".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from oncegraph import END, START, MessagesState, StateGraph, ToolNode, current_effect, tool
from oncegraph.errors import RunNotFoundError, StorageFullError
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.postgres import fresh_database
from oncegraph.testing.provider import FakeProvider, ProviderClient

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
T = {"thread_id": "t-full"}
BIG = "x" * 300_000  # an input that needs pages the full disk does not have
USER = {"messages": [{"role": "user", "content": "refund order 1042 " + BIG}]}


class TinyDisk:
    """A tmpfs of a few MiB; :meth:`fill` takes every free byte (once), :meth:`free`
    gives them back."""

    def __init__(self, size: str = "6m") -> None:
        # in /tmp itself: the PostgreSQL server's user must reach it (pytest's tmp is 0700)
        self.path = Path(tempfile.mkdtemp(prefix="oncegraph-tiny-"))
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        self.filler = self.path / "filler"
        self.filled = False

    def fill(self) -> None:
        if self.filled:
            return
        self.filled = True
        st = os.statvfs(self.path)
        with open(self.filler, "ab") as f, contextlib.suppress(OSError):
            f.write(b"\0" * (st.f_bavail * st.f_frsize))
            f.flush()

    def free(self) -> None:
        self.filler.unlink()

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=True)
        self.path.rmdir()


class World:
    """The store on the tiny disk, the provider, and a graph that decides one refund."""

    def __init__(self, backend: str, disk: TinyDisk, store: Checkpointer, url: str) -> None:
        self.backend, self.disk, self.store = backend, disk, store
        self.client = ProviderClient(url)
        run_sync(store.setup(), "setup")
        run_sync(store.request_hash_key(), "key")  # the database's secret exists already

    def app(self, fill_at: str = "") -> Any:
        client, disk = self.client, self.disk

        @tool
        def refund(order_id: str) -> str:
            """Refund an order."""
            charged = client.charge(
                10, "eur", order_id, idempotency_key=current_effect().idempotency_key
            )
            if fill_at == "tool":
                disk.fill()
            return f"{charged['id']} {BIG}"  # a result that needs new pages too

        def decide(state: MessagesState) -> dict[str, Any]:
            if fill_at == "decide":
                disk.fill()
            call = {"id": "c1", "name": "refund", "args": {"order_id": "1042"}}
            return {"messages": [{"role": "assistant", "content": BIG, "tool_calls": [call]}]}

        g = StateGraph(MessagesState)
        g.add_node("decide", decide)
        g.add_node("tools", ToolNode([refund]))
        g.add_edge(START, "decide")
        g.add_edge("decide", "tools")
        g.add_edge("tools", END)
        return g.compile(checkpointer=self.store)

    def performed(self) -> int:
        return int(self.client.stats()["performed"])


def _pg_tablespace(disk: TinyDisk, admin: str) -> Iterator[str]:
    """A fresh database whose oncegraph tables all live on ``disk`` (as a tablespace)."""
    name = f"og_tiny_{uuid.uuid4().hex[:12]}"
    shutil.chown(disk.path, "postgres", "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE TABLESPACE {name} LOCATION '{disk.path}'")
    try:
        with fresh_database(admin, prefix="full") as dsn:
            run_sync(PgCheckpointer(dsn).setup(), "setup")  # the schema, on the main disk
            with psycopg.connect(dsn, autocommit=True) as conn:
                tables = "SELECT tablename FROM pg_tables WHERE tablename LIKE 'oncegraph_%'"
                for (table,) in conn.execute(tables).fetchall():
                    conn.execute(f"ALTER TABLE {table} SET TABLESPACE {name}")
                indexes = "SELECT indexname FROM pg_indexes WHERE tablename LIKE 'oncegraph_%'"
                for (index,) in conn.execute(indexes).fetchall():
                    conn.execute(f"ALTER INDEX {index} SET TABLESPACE {name}")
            yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP TABLESPACE IF EXISTS {name}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    backend = str(request.param)
    disk = TinyDisk()
    try:
        with contextlib.ExitStack() as stack:
            if backend == "postgres":
                admin = str(request.getfixturevalue("pg_admin"))
                dsn = stack.enter_context(contextlib.contextmanager(_pg_tablespace)(disk, admin))
                store: Checkpointer = PgCheckpointer(dsn)
            else:
                store = SqliteCheckpointer(disk.path / "runs.db")
            provider = stack.enter_context(FakeProvider())
            try:
                yield World(backend, disk, store, provider.url)
            finally:
                run_sync(store.aclose(), "aclose")
    finally:
        disk.close()


def test_a_run_started_on_a_full_disk_says_it_was_not_started(
    world: World, run_path: RunPath
) -> None:
    world.disk.fill()
    with pytest.raises(StorageFullError) as caught:
        run_path(world.app(), USER, T)
    text = str(caught.value)
    assert not isinstance(caught.value, RunNotFoundError)
    assert "full" in text or "out of disk space" in text
    assert "was not started" in text and "no record of it exists" in text
    assert "start it again" in text and "free space" in text.lower()
    assert world.app().runs(thread_id=T["thread_id"]) == []
    world.disk.free()
    out = run_path(world.app(), USER, T)  # started again: it runs, once
    assert out["messages"][-1]["name"] == "refund"
    assert world.performed() == 1


def test_a_full_disk_before_the_tools_step_says_the_tool_did_not_run(world: World) -> None:
    with pytest.raises(StorageFullError) as caught:
        world.app(fill_at="decide").invoke(USER, T)
    text = str(caught.value)
    assert "The tool calls this step decided (refund) did NOT run" in text
    assert "can be resumed" in text and "free space" in text.lower()
    assert world.performed() == 0
    world.disk.free()
    out = world.app().invoke(None, T)
    assert out["messages"][-1]["name"] == "refund"
    assert world.performed() == 1


def test_a_full_disk_after_the_tool_ran_says_its_result_is_not_recorded(world: World) -> None:
    with pytest.raises(StorageFullError) as caught:
        world.app(fill_at="tool").invoke(USER, T)
    text = str(caught.value)
    assert "(refund) DID run" in text and "results are not recorded" in text
    assert "same idempotency key" in text and "can be resumed" in text
    assert world.performed() == 1
    world.disk.free()
    out = world.app().invoke(None, T)  # the write goes again, with its key: no new charge
    assert out["messages"][-1]["name"] == "refund"
    assert world.performed() == 1
    assert int(world.client.stats()["replayed"]) == 1


def test_the_api_answers_503_with_what_happened(world: World) -> None:
    from oncegraph.server import create_app

    keys = {"k-operator-0001": {"role": "operator", "name": "otto"}}
    headers = {"Authorization": "Bearer k-operator-0001"}
    with TestClient(create_app(world.app(), keys=keys), raise_server_exceptions=False) as api:
        world.disk.fill()
        answer = api.post("/api/threads/t-full/runs", headers=headers, json={"input": USER})
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "storage_full"
        assert "was not started" in error["message"]
        world.disk.free()
        answer = api.post(
            "/api/threads/t-full/runs", headers=headers, json={"input": USER, "wait": True}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["run"]["status"] == "completed"
    assert world.performed() == 1

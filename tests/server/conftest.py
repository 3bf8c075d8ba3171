"""Server fixtures: the shop app on a store, served in-process (``client``: Starlette's
TestClient) or by a real uvicorn on a free port (``live``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from shop import KEYS, Shop
from starlette.testclient import TestClient

from oncegraph.runtime.portal import run_sync
from oncegraph.server import create_app
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.provider import FakeProvider


def make_checkpointer(kind: str, tmp_path: Path, dsn: str | None) -> Checkpointer:
    if kind == "postgres":
        from oncegraph.storage.checkpointer import PgCheckpointer

        assert dsn is not None
        return PgCheckpointer(dsn)
    return SqliteCheckpointer(tmp_path / "server.db")


def close_store(store: Checkpointer) -> None:
    run_sync(store.aclose(), "aclose")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """The main flows run on SQLite and PostgreSQL."""
    kind = str(request.param)
    dsn = request.getfixturevalue("fresh_dsn") if kind == "postgres" else None
    found = make_checkpointer(kind, tmp_path, dsn)
    yield found
    close_store(found)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Checkpointer]:
    found = make_checkpointer("sqlite", tmp_path, None)
    yield found
    close_store(found)


@pytest.fixture
def shop(store: Checkpointer) -> Iterator[Shop]:
    with FakeProvider() as provider:
        yield Shop(store, provider)


@pytest.fixture
def sqlite_shop(sqlite_store: Checkpointer) -> Iterator[Shop]:
    with FakeProvider() as provider:
        yield Shop(sqlite_store, provider)


def client_for(shop: Shop, **options: Any) -> TestClient:
    return TestClient(create_app(shop.app, keys=KEYS, **options), raise_server_exceptions=False)


@pytest.fixture
def client(shop: Shop) -> Iterator[TestClient]:
    with client_for(shop) as c:
        yield c


@pytest.fixture
def sqlite_client(sqlite_shop: Shop) -> Iterator[TestClient]:
    with client_for(sqlite_shop) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Live:
    url: str
    server: uvicorn.Server
    thread: threading.Thread


def start_live(shop: Shop, **options: Any) -> Live:
    port = free_port()
    config = uvicorn.Config(
        create_app(shop.app, keys=KEYS, **options),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return Live(f"http://127.0.0.1:{port}", server, thread)


def stop_live(live: Live) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=30)


@pytest.fixture
def live(sqlite_shop: Shop) -> Iterator[Live]:
    found = start_live(sqlite_shop)
    yield found
    stop_live(found)


# -- every store, memory included (idempotency keys, audit, recovery) ------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def kept(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """Every store, the in-memory one too (what a server keeps: idempotency keys, audit
    records, runs to take over)."""
    kind = str(request.param)
    if kind == "memory":
        yield InMemoryCheckpointer()
        return
    dsn = request.getfixturevalue("fresh_dsn") if kind == "postgres" else None
    found = make_checkpointer(kind, tmp_path, dsn)
    yield found
    close_store(found)


@pytest.fixture
def kshop(kept: Checkpointer) -> Iterator[Shop]:
    with FakeProvider() as provider:
        yield Shop(kept, provider)


@pytest.fixture
def kclient(kshop: Shop) -> Iterator[TestClient]:
    """The shop's server with no recovery pass: a run a test leaves running stays so."""
    with client_for(kshop, recover=False) as c:
        yield c



"""Listings are read on a connection of their own: a read is answered while a write
transaction is held open, masked and scoped as before (SQLite and PostgreSQL; the
in-memory store reads in place)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shop import ACME, ADMIN, CARD, OPERATOR, VIEWER, Shop, auth

from conftest import client_for
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.provider import FakeProvider

ASK = {"messages": [{"role": "user", "content": f"refund order 1042 to card {CARD}"}]}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    if request.param == "memory":
        store: Checkpointer = InMemoryCheckpointer()
    else:
        store = request.getfixturevalue("store" if request.param == "postgres" else "sqlite_store")
    with FakeProvider() as provider:
        yield Shop(store, provider)


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """PostgreSQL only here (the SQLite file is ``sqlite_store``)."""
    from conftest import close_store, make_checkpointer

    found = make_checkpointer("postgres", tmp_path, request.getfixturevalue("fresh_dsn"))
    yield found
    close_store(found)


class HeldOpen:
    """A write transaction held open on the served store until :meth:`release`: on
    SQLite on the store's own connection (its lock held, ``BEGIN IMMEDIATE`` done, as a
    group of step commits holds it through its fsync); on PostgreSQL a transaction that
    updated every run row and has not committed."""

    def __init__(self, store: Checkpointer, dsn: str | None) -> None:
        self.held = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(store, dsn), daemon=True)
        self.error: BaseException | None = None

    def _hold(self, store: Any, dsn: str | None) -> None:
        try:
            if dsn is not None:
                import psycopg

                with psycopg.connect(dsn) as conn, conn.transaction():
                    conn.execute("UPDATE oncegraph_runs SET updated_at = updated_at")
                    self.held.set()
                    self._release.wait()
            else:
                with store._writing() as conn:
                    conn.execute("UPDATE oncegraph_runs SET updated_at = updated_at")
                    self.held.set()
                    self._release.wait()
        except BaseException as exc:  # the test reports it
            self.error = exc
            self.held.set()

    def __enter__(self) -> HeldOpen:
        self._thread.start()
        self.held.wait()
        assert self.error is None, self.error
        return self

    def release(self) -> None:
        self._release.set()
        self._thread.join()
        assert self.error is None, self.error

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join()


def _dsn(request: pytest.FixtureRequest) -> str | None:
    return str(request.getfixturevalue("fresh_dsn")) if "postgres" in request.node.name else None


def test_a_listing_is_answered_while_a_write_transaction_is_held_open(
    any_shop: Shop, request: pytest.FixtureRequest
) -> None:
    store = any_shop.app.checkpointer
    assert store is not None
    with client_for(any_shop, recover=False) as client:
        started = []
        for key, thread in ((OPERATOR, "t-one"), (OPERATOR, "t-two"), (ACME, "acme:t-three")):
            got = client.post(
                f"/api/threads/{thread}/runs", headers=auth(key), json={"input": ASK, "wait": True}
            )
            assert got.status_code == 200, got.text
            assert got.json()["run"]["status"] == "completed"
            started.append(got.json()["run_id"])

        def listing(key: str) -> dict[str, Any]:
            got = client.get("/api/runs", params={"limit": 50}, headers=auth(key))
            assert got.status_code == 200, got.text
            return {r["run_id"]: r for r in got.json()["runs"]}

        if isinstance(store, InMemoryCheckpointer):  # no transaction to hold: in place
            held = None
        else:
            held = HeldOpen(store, _dsn(request)).__enter__()
        try:
            # answered while the writer still holds its transaction (released after)
            seen = listing(VIEWER)
            tenant = listing(ACME)
            admin = listing(ADMIN)
        finally:
            if held is not None:
                held.release()
    assert set(seen) == set(started) and set(admin) == set(started)
    assert {r["status"] for r in seen.values()} == {"completed"}
    assert set(tenant) == {started[2]}, "a tenant's key lists its tenant's runs only"
    for shown in (seen, tenant, admin):  # the effects' masked card, learned by the reader
        for run in shown.values():
            assert run["input"]["messages"][0]["content"] == "refund order 1042 to card ***"

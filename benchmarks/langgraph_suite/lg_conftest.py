"""LangGraph's ``tests/conftest.py``, replaced: the same fixture names and parameters, on
oncegraph's stores.

The runner copies this file over ``tests/conftest.py`` in its temporary copy of
LangGraph's tests. LangGraph's fixtures and their ids are kept so that node ids read
the same as on LangGraph (``test_x[memory]``, ``test_y[sqlite-sync]``):

* ``sync_checkpointer`` / ``async_checkpointer``: ``memory``, ``sqlite``, ``postgres``
  (LangGraph's extra variants of one store - a pipeline, a pool, an encrypting or
  migrating serializer - exercise LangGraph's savers, not the graph, and are left out).
  oncegraph has one async core, so the two fixtures give the same kind of store; the
  PostgreSQL one is a brand-new database per test, created from
  ``ONCEGRAPH_TEST_PG_DSN``, dropped afterwards. ``LG_SUITE_BACKENDS`` (comma
  separated) limits the stores.
* ``durability``: ``sync``, ``async``, ``exit``.
* ``cache`` (``sqlite``, ``memory``), ``sync_store``, ``async_store`` (``in_memory``):
  built from LangGraph's names through the import redirection, so they fail in setup
  (a counted error) while oncegraph has no equivalent, and work as soon as it has one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

NO_DOCKER = os.getenv("NO_DOCKER", "false") == "true"  # LangGraph's test modules import it

_ALL_BACKENDS = ("memory", "sqlite", "postgres")
BACKENDS = [
    b.strip() for b in os.environ.get("LG_SUITE_BACKENDS", ",".join(_ALL_BACKENDS)).split(",")
]


def _store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    from oncegraph.runtime.portal import run_sync
    from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer

    if kind == "memory":
        store: Any = InMemoryCheckpointer()
    elif kind == "sqlite":
        store = SqliteCheckpointer(tmp_path / "langgraph-suite.db")
    elif kind == "postgres":
        from oncegraph.storage.checkpointer import PgCheckpointer
        from oncegraph.testing.postgres import admin_dsn, fresh_database

        databases = fresh_database(admin_dsn(), prefix="lgsuite")
        dsn = databases.__enter__()
        request.addfinalizer(lambda: databases.__exit__(None, None, None))
        store = PgCheckpointer(dsn)
    else:
        raise ValueError(f"unknown store {kind!r}; LG_SUITE_BACKENDS takes {_ALL_BACKENDS}")
    # As LangGraph's own fixtures do (``checkpointer.setup()`` before the test): the
    # schema is made before the test starts, so a test timing its first chunk does not
    # time the migration of a fresh database.
    run_sync(store.setup(), "setup")
    try:
        yield store
    finally:
        # aclose on the portal: a store used through invoke() opened its pool there.
        run_sync(store.aclose(), "aclose")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture()
def deterministic_uuids(mocker: Any) -> Any:
    side_effect = (UUID(f"00000000-0000-4000-8000-{i:012}", version=4) for i in range(10000))
    return mocker.patch("uuid.uuid4", side_effect=side_effect)


@pytest.fixture(params=["sync", "async", "exit"])
def durability(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# LangGraph's Redis variant of the cache is left out, as are its PostgreSQL stores:
# they run LangGraph's own backends of a cache / store through the same graph code.
@pytest.fixture(params=["sqlite", "memory"])
def cache(request: pytest.FixtureRequest) -> Any:
    if request.param == "sqlite":
        from langgraph.cache.sqlite import SqliteCache

        return SqliteCache(path=":memory:")
    from langgraph.cache.memory import InMemoryCache

    return InMemoryCache()


def _memory_store() -> Any:
    from langgraph.store.memory import InMemoryStore

    return InMemoryStore()


@pytest.fixture(params=["in_memory"])
def sync_store(request: pytest.FixtureRequest) -> Any:
    return _memory_store()


@pytest.fixture(params=["in_memory"])
def async_store(request: pytest.FixtureRequest) -> Any:
    return _memory_store()


@pytest.fixture(params=BACKENDS)
def sync_checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _store(str(request.param), request, tmp_path)


@pytest.fixture(params=BACKENDS)
def async_checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _store(str(request.param), request, tmp_path)

"""Shared fixtures: a checkpointer per backend, and one way to run an app on every path.

``checkpointer`` is parametrized over ``memory``, ``sqlite`` (a fresh file per test) and
``postgres`` (a fresh database per test, from ``fresh_dsn``), so every law suite runs on
every backend. ``pg_admin`` checks once that PostgreSQL is reachable: without it the
PostgreSQL cases skip with the reason, except under ``CI=true``, where they fail.
``run_path`` is parametrized over ``invoke``, ``ainvoke``, ``stream`` and ``astream``:
it is ONE callable ``run_path(app, input, config) -> dict`` that returns the final
values the same way on all four paths, so every law is tested on every path:

* ``invoke`` / ``ainvoke``: the return value;
* ``stream`` / ``astream`` (modes ``values`` + ``updates``): the last ``values`` event,
  with the ``__interrupt__`` list of an ``updates`` event surfaced as
  ``values["__interrupt__"]``. A stream that emits no ``values`` event (a resumed node
  that interrupts again before any step commits) falls back to the thread's head state.

Errors propagate unchanged on every path. The async paths run on a fresh event loop
per call (like ``asyncio.run``, but closing it does not join the default executor, so a
sync node abandoned by a timeout cannot hold the test up), so tests stay plain
functions and may also call the sync API.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fresh_databases import FreshDatabases
from oncegraph.app import CompiledGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.postgres import admin_dsn, unreachable

RunPath = Callable[[CompiledGraph, Any, Mapping[str, Any] | None], dict[str, Any]]
PATHS = ("invoke", "ainvoke", "stream", "astream")
STREAM_MODES = ["values", "updates"]
T = TypeVar("T")


BACKENDS = ("memory", "sqlite", "postgres")


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """The DSN test databases are created from; skips (fails under CI) if unreachable."""
    dsn = admin_dsn()
    problem = unreachable(dsn)
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI=true: {problem}")
        pytest.skip(f"PostgreSQL unreachable ({problem}); set ONCEGRAPH_TEST_PG_DSN")
    return dsn


@pytest.fixture(scope="session")
def fresh_databases(pg_admin: str) -> Iterator[FreshDatabases]:
    """Brand-new databases made ahead of the tests, used ones dropped in the background."""
    databases = FreshDatabases(pg_admin)
    yield databases
    databases.close()


@pytest.fixture
def fresh_dsn(fresh_databases: FreshDatabases) -> Iterator[str]:
    """A DSN to a brand-new, empty database (no schema yet), dropped after the test."""
    dsn = fresh_databases.take()
    try:
        yield dsn
    finally:
        fresh_databases.give_back(dsn)


def make_checkpointer(kind: str, tmp_path: Path, dsn: str | None = None) -> Checkpointer:
    """A new store of ``kind`` (``memory``, ``sqlite`` or ``postgres``), not yet set up."""
    if kind == "memory":
        return InMemoryCheckpointer()
    if kind == "sqlite":
        return SqliteCheckpointer(tmp_path / "oncegraph.db")
    if kind == "postgres":
        from oncegraph.storage.checkpointer import PgCheckpointer

        assert dsn is not None, "a postgres store needs the fresh_dsn fixture"
        return PgCheckpointer(dsn)
    raise ValueError(f"unknown checkpointer kind {kind!r}")


@pytest.fixture(params=BACKENDS)
def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    kind = str(request.param)
    dsn = request.getfixturevalue("fresh_dsn") if kind == "postgres" else None
    store = make_checkpointer(kind, tmp_path, dsn)
    yield store
    close_store(store)


@pytest.fixture
def reopen(
    checkpointer: Checkpointer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], Checkpointer]]:
    """A second store on what ``checkpointer`` wrote (the memory store: itself); on
    PostgreSQL ``fresh_dsn`` is this test's own database, the one ``checkpointer`` opened."""
    opened: list[Checkpointer] = []

    def again() -> Checkpointer:
        kind = type(checkpointer).__name__
        if "Memory" in kind:
            return checkpointer
        dsn = request.getfixturevalue("fresh_dsn") if "Pg" in kind else None
        store = make_checkpointer("postgres" if dsn else "sqlite", tmp_path, dsn)
        opened.append(store)
        return store

    yield again
    for store in opened:
        close_store(store)


def close_store(store: Checkpointer) -> None:
    """Close ``store`` on whatever loops it opened: the portal's (sync API) and others."""
    from oncegraph.runtime.portal import run_sync

    run_sync(store.aclose(), "aclose")


def _fold_stream(items: list[tuple[str, Any]]) -> tuple[dict[str, Any] | None, list[Any]]:
    values: dict[str, Any] | None = None
    interrupts: list[Any] = []
    for mode, payload in items:
        if mode == "values":
            values = dict(payload)
        elif mode == "updates" and "__interrupt__" in payload:
            interrupts.extend(payload["__interrupt__"])  # one chunk per task asking
    return values, interrupts


async def _astream_final(
    app: CompiledGraph, inp: Any, config: Mapping[str, Any] | None
) -> dict[str, Any]:
    items = [item async for item in app.astream(inp, config, stream_mode=STREAM_MODES)]
    values, interrupts = _fold_stream(items)
    if values is None:
        values = dict((await app.aget_state(config or {})).values)
    if interrupts:
        values["__interrupt__"] = interrupts
    return values


def _stream_final(app: CompiledGraph, inp: Any, config: Mapping[str, Any] | None) -> dict[str, Any]:
    items = list(app.stream(inp, config, stream_mode=STREAM_MODES))
    values, interrupts = _fold_stream(items)
    if values is None:
        values = dict(app.get_state(config or {}).values)
    if interrupts:
        values["__interrupt__"] = interrupts
    return values


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a new event loop, then cancel leftovers and close the loop."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # shuts the executor down without waiting for abandoned threads


def run_on(path: str) -> RunPath:
    """The runner for one path; see the module docstring."""

    def run(app: CompiledGraph, inp: Any, config: Mapping[str, Any] | None) -> dict[str, Any]:
        if path == "invoke":
            return app.invoke(inp, config)
        if path == "ainvoke":
            return run_async(app.ainvoke(inp, config))
        if path == "stream":
            return _stream_final(app, inp, config)
        if path == "astream":
            return run_async(_astream_final(app, inp, config))
        raise ValueError(f"unknown run path {path!r}")

    return run


@pytest.fixture(params=PATHS)
def run_path(request: pytest.FixtureRequest) -> RunPath:
    return run_on(str(request.param))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with a test marked ``slow`` (crash matrices, multi-process tests) run first,
    each module kept whole and in its own order, so that under ``-n auto`` the workers share
    the long tests out early and finish together on the many short ones."""
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)

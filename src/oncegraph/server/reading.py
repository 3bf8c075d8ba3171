"""Reads on their own connection, in a thread of their own: listings never wait for writes.

The runs a server drives write from its event loop: on SQLite each group of step commits
holds the store's one connection (and its lock) through ``COMMIT`` and its fsync, and
every read on that connection waits for it, with the loop stopped meanwhile. So the
listings' reads (``GET /api/runs`` and the masked values a response learns) go through
:class:`Readers`: a thread running an event loop of its own, with

* on SQLite, a second store on the same file (a connection of its own, opened without
  migrating: the server's store migrated it at start-up). SQLite in WAL mode lets a
  reader read the last commit while a writer holds its transaction open;
* on PostgreSQL, the same store, which opens a pool of its own in each event loop;
* on any other store (the in-memory one, a store private to the loop), nothing: the
  reads run in place, on the server's loop, as before.

The reader sees every write committed before its read began (a run whose ``commit``
returned), which is all a listing shows; it never writes. Scope and masking are the
run service's, as on the server's own graph: the reader's app is the same graph over the
reader's store, bound to the caller's tenant the same way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from oncegraph._loopbound import loop_thread
from oncegraph.app import CompiledGraph
from oncegraph.server.database_app import DatabaseApp

T = TypeVar("T")

THREAD_NAME = "oncegraph-readers"


def _reader_app(graph: CompiledGraph) -> tuple[CompiledGraph, bool] | None:
    """The app the readers use and whether it has a store of its own to close, or None
    (reads stay on the server's loop)."""
    from oncegraph.storage.sql.sqlite import SqliteCheckpointer

    store = graph.checkpointer
    if type(store) is SqliteCheckpointer and store.path != ":memory:":
        twin = SqliteCheckpointer(
            store.path,
            synchronous=store.synchronous,
            busy_timeout_ms=store.busy_timeout_ms,
            auto_migrate=False,
            encryption=store.rows.encryption,
        )
        if isinstance(graph, DatabaseApp):
            return DatabaseApp(twin), True
        if type(graph) is not CompiledGraph:
            return None  # an app class of its own: reads stay where it put them
        return CompiledGraph(graph.spec, checkpointer=twin), True
    try:
        from oncegraph.storage.sql.postgres import PgCheckpointer
    except ImportError:  # no PostgreSQL driver: not a PostgreSQL store either
        return None
    if isinstance(store, PgCheckpointer):
        return graph, False  # a pool of its own in the readers' loop
    return None


class Readers:
    """The server's readers (see the module docstring). :meth:`start` at start-up,
    :meth:`aclose` at shutdown; before :meth:`start` (an app used without its lifespan),
    :meth:`read` runs in place."""

    def __init__(self, graph: CompiledGraph) -> None:
        self._graph = graph
        self._app: CompiledGraph | None = None
        self._owned = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        found = _reader_app(self._graph)
        if found is None or self._loop is not None:
            return
        self._app, self._owned = found
        self._loop, self._thread = loop_thread(THREAD_NAME)

    async def read(self, tenant: str | None, read: Callable[[CompiledGraph], Awaitable[T]]) -> T:
        """``await read(app)`` with the readers' app (bound to ``tenant`` if given), in
        the readers' thread; in place on the server's app before :meth:`start`."""
        loop, app = self._loop, self._app
        if loop is None or app is None:
            app = self._graph
            return await read(app.for_tenant(tenant) if tenant is not None else app)
        bound = app.for_tenant(tenant) if tenant is not None else app

        async def call() -> T:
            return await read(bound)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), loop))

    async def aclose(self) -> None:
        """Close what the readers opened and end their thread. Idempotent."""
        loop, thread, app = self._loop, self._thread, self._app
        self._loop = self._thread = self._app = None
        if loop is None or thread is None or app is None:
            return

        async def close() -> None:
            store: Any = app.checkpointer
            if self._owned:
                await store.aclose()
            else:  # the server's store: close only what this loop opened
                await store.aclose_home()

        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(close(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
            loop.close()


__all__ = ["Readers"]

"""The sync facade's portal: one background event loop thread per process.

``invoke``/``stream`` hand their coroutine to this loop and block on the result, so
connection pools bound to a loop live on one loop for the life of the process.

A caller whose thread already runs an event loop (a Jupyter cell, an async web handler
calling the sync API) is served the same way: its loop is blocked for the call, as any
blocking call blocks it, and nothing the portal runs waits on that loop (stores keep
one pool per loop, and the portal's loop gets its own). The one call refused is from
the portal's own thread (a node or tool calling ``invoke``): it would wait for itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from oncegraph.errors import ConfigError

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=serve, name="oncegraph-portal", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def _refuse_on_portal(api: str) -> None:
    """The sync API from the portal's own thread would wait for itself: refuse it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is _loop:
        raise ConfigError(
            f"{api}() was called from oncegraph's own event loop (inside a node or tool?) and "
            f"would wait for itself forever; use `await a{api}(...)` there, or make the node "
            "a plain (sync) function, which runs in a worker thread"
        )


def run_sync(coro: Coroutine[Any, Any, T], api: str = "invoke") -> T:
    try:
        _refuse_on_portal(api)
    except ConfigError:
        coro.close()
        raise
    future = asyncio.run_coroutine_threadsafe(coro, _portal_loop())
    try:
        return future.result()
    except (KeyboardInterrupt, concurrent.futures.CancelledError):
        future.cancel()
        raise


def iterate_sync(agen: AsyncIterator[T], api: str = "stream") -> Iterator[T]:
    _refuse_on_portal(api)

    async def step() -> tuple[bool, Any]:
        try:
            return True, await agen.__anext__()
        except StopAsyncIteration:
            return False, None

    try:
        while True:
            more, item = run_sync(step(), api)
            if not more:
                return
            yield item
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            run_sync(aclose(), api)

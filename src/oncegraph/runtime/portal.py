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
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from oncegraph._loopbound import home_loop, is_home, submit_home
from oncegraph.errors import ConfigError

T = TypeVar("T")


def _portal_loop() -> asyncio.AbstractEventLoop:
    return home_loop()


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the portal loop from any thread, without waiting for it.

    For work that must outlive the caller's own loop: the outcome of a call that ended
    after its run stopped is recorded here (see :mod:`oncegraph.runtime.claim`).
    """
    return submit_home(coro)


def _refuse_on_portal(api: str) -> None:
    """The sync API from the portal's own thread would wait for itself: refuse it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if is_home(running):
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

"""The sync facade's portal: one background event loop thread per process.

``invoke``/``stream`` hand their coroutine to this loop and block on the result, so
connection pools bound to a loop live on one loop for the life of the process.

A caller whose thread already runs an event loop (a Jupyter cell, an async web handler
calling the sync API) is served the same way: its loop is blocked for the call, as any
blocking call blocks it, and nothing the portal runs waits on that loop (stores keep
one pool per loop, and the portal's loop gets its own). The one call refused is from
the portal's own thread (a node or tool calling ``invoke``): it would wait for itself.
The blocking itself (``run_sync``, ``iterate_sync``) lives in :mod:`oncegraph._blocking`,
below the stores, which use it too; it is re-exported here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from oncegraph._blocking import iterate_sync, run_sync
from oncegraph._loopbound import home_loop, submit_home

T = TypeVar("T")


def _portal_loop() -> asyncio.AbstractEventLoop:
    return home_loop()


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the portal loop from any thread, without waiting for it.

    For work that must outlive the caller's own loop: the outcome of a call that ended
    after its run stopped is recorded here (see :mod:`oncegraph.runtime.claim`).
    """
    return submit_home(coro)


__all__ = ["iterate_sync", "run_sync", "submit"]

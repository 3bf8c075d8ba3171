"""Large answers built off the event loop.

A listing's body (a page of runs, effects, audit records or snapshots, encoded and masked
for the caller, then rendered as JSON) is CPU work proportional to the page: a thousand
runs hold a loop for tens of milliseconds, and every other request and every run the
server drives on that loop waits behind it. From :data:`OFF_LOOP_FROM` items on, the body
is built in the server's thread pool instead, so reads do not stall writes; smaller pages
stay on the loop, where a thread hop would cost more than the work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

OFF_LOOP_FROM = 50


async def json_page(items: int, build: Callable[[], Any]) -> JSONResponse:
    """``JSONResponse(build())``, built and rendered in a worker thread when the page has
    ``items`` >= :data:`OFF_LOOP_FROM` entries (``build`` must only read its inputs)."""
    if items < OFF_LOOP_FROM:
        return JSONResponse(build())
    return await run_in_threadpool(lambda: JSONResponse(build()))


__all__ = ["OFF_LOOP_FROM", "json_page"]

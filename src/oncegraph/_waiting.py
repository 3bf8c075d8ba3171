"""Waiting for one future under a timeout without cancelling it.

``asyncio.wait({future}, timeout=t)`` does this for any number of futures and costs
about twice as much as awaiting the future (a set, a counter, a callback per future and
the done/pending sets it builds); the ledger and the node runner wait like this once per
call of every tool and every sync node, so this is the one-future version.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_done(future: asyncio.Future[Any], timeout: float | None) -> bool:
    """Wait until ``future`` is done, at most ``timeout`` seconds (None: no limit);
    whether it is done. ``future`` is never cancelled here: on a timeout it goes on, and
    cancelling the waiting task stops only the wait (as with ``asyncio.wait``)."""
    if future.done():
        return True
    loop = future.get_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object) -> None:
        if not woken.done():
            woken.set_result(None)

    future.add_done_callback(wake)
    timer = loop.call_later(timeout, wake, None) if timeout is not None else None
    try:
        await woken
    finally:
        future.remove_done_callback(wake)
        if timer is not None:
            timer.cancel()
    return future.done()


__all__ = ["wait_done"]

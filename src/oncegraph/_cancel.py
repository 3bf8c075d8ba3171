"""Stopping a task for good: cancel it, and cancel it again while it has not ended.

A cancellation can be swallowed by code the task awaits: on Python 3.11,
``asyncio.wait_for`` returns the inner result when the inner awaitable ends in the same
loop turn as the cancellation (fixed in 3.12), and psycopg_pool waits for a free
connection with it. A run cancelled at that moment goes on to its next step and, once
in a tool call that waits for something, would hold up whoever waits for it to end (a
worker shutting down, a closing server) for good. So whoever stops a run cancels it
again until it ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

AGAIN_SECONDS = 0.1


async def cancel_and_wait(task: asyncio.Future[Any], *, again: float = AGAIN_SECONDS) -> None:
    """Cancel ``task`` and return once it has ended, cancelling it again every ``again``
    seconds it has not. What it ended with is dropped (an error it raised meanwhile is
    marked retrieved, not reported as never retrieved)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=again)
    if not task.cancelled():
        task.exception()


__all__ = ["AGAIN_SECONDS", "cancel_and_wait"]

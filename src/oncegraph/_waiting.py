"""Waiting for one future under a timeout without cancelling it.

``asyncio.wait({future}, timeout=t)`` does this for any number of futures and costs
about twice as much as awaiting the future (a set, a counter, a callback per future and
the done/pending sets it builds); the ledger and the node runner wait like this once per
call of every tool and every sync node, so this is the one-future version.

Its timeouts share one timer per loop: a wait pushes its deadline on the loop's heap of
deadlines, and a single ``TimerHandle`` is armed for the earliest; when it fires it wakes
the waits whose deadline has come and is armed again for the next one still waiting. A
wait that ends first is not taken out of the heap (it is skipped when reached, and the
heap is rebuilt without them once they are most of it). That replaces a ``call_later``
and its ``cancel`` per wait (a ``TimerHandle`` made, pushed on the loop's heap and popped
from it later, compared in Python) with a tuple pushed on a heap compared in C.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any

# the loop's own margin: a timer is due when its time is within the clock's resolution
_RESOLUTION = time.get_clock_info("monotonic").resolution
_REBUILD_AT = 256  # ended waits the heap may hold before it is rebuilt without them
_ATTRIBUTE = "_oncegraph_deadlines"


class _Deadlines:
    """One loop's timed waits: (deadline, number, the wait's future) in a heap, and one
    ``TimerHandle`` armed for the earliest deadline (of a wait that may have ended)."""

    __slots__ = ("armed", "armed_at", "count", "ended", "heap", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self.count = itertools.count()
        self.armed: asyncio.TimerHandle | None = None
        self.armed_at = 0.0
        self.ended = 0  # waits that ended before their deadline and are still in the heap

    def add(self, deadline: float, woken: asyncio.Future[None]) -> None:
        heapq.heappush(self.heap, (deadline, next(self.count), woken))
        if self.armed is None or deadline < self.armed_at:
            if self.armed is not None:
                self.armed.cancel()
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        self.armed = self.loop.call_at(deadline, self._fire)
        self.armed_at = deadline

    def ended_early(self) -> None:
        """A wait ended before its deadline: rebuild the heap once they are most of it."""
        self.ended += 1
        if self.ended >= _REBUILD_AT and self.ended * 2 > len(self.heap):
            self.heap = [entry for entry in self.heap if not entry[2].done()]
            heapq.heapify(self.heap)
            self.ended = 0

    def _fire(self) -> None:
        self.armed = None
        heap = self.heap
        due = self.loop.time() + _RESOLUTION
        while heap:
            deadline, _, woken = heap[0]
            if woken.done():  # ended before its deadline
                heapq.heappop(heap)
                self.ended = max(self.ended - 1, 0)
            elif deadline <= due:
                heapq.heappop(heap)
                woken.set_result(None)
            else:
                self._arm(deadline)
                return


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines | None:
    """The loop's deadlines, kept on the loop itself (so they go with it); None for a
    loop that takes no attributes."""
    deadlines: _Deadlines | None = getattr(loop, _ATTRIBUTE, None)
    if deadlines is None:
        deadlines = _Deadlines(loop)
        try:
            setattr(loop, _ATTRIBUTE, deadlines)
        except AttributeError:
            return None
    return deadlines


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
    if timeout is None:
        try:
            await woken
        finally:
            future.remove_done_callback(wake)
        return True
    deadlines = _deadlines(loop)
    if deadlines is None:
        timer = loop.call_later(timeout, wake, None)
        try:
            await woken
        finally:
            future.remove_done_callback(wake)
            timer.cancel()
        return future.done()
    deadlines.add(loop.time() + timeout, woken)
    try:
        await woken
    finally:
        future.remove_done_callback(wake)
        if future.done() or woken.cancelled():  # (one that timed out was taken out)
            deadlines.ended_early()
    return future.done()


__all__ = ["wait_done"]

"""``config["max_concurrency"]``: at most N tasks of a step run at once.

LangChain's ``RunnableConfig`` key, as LangGraph reads it: a step of many tasks (a fan
out of ``Send``s, parallel branches) starts them in order, at most ``max_concurrency``
at a time; the next one starts when one ends. Unset (or ``None``), every task of a step
runs at once. The step still ends when all its tasks have ended, and its writes are
committed together, as without a limit.

:func:`run_together` runs a step's tasks and, past the graph's ``step_timeout``, cancels
every one still running (as LangGraph does; as a node's own timeout cancels it). A
failing task does not stop its siblings: each finishes, so none is cancelled in the
middle of a tool call (its outcome would be unknown), and their writes are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from oncegraph.runtime.config import RunConfig

T = TypeVar("T")


def max_concurrency(config: RunConfig) -> int | None:
    """The call's ``max_concurrency`` (a positive int, checked by :meth:`RunConfig.parse`),
    or ``None`` when it sets none."""
    width = config.configurable.get("max_concurrency")
    return width if isinstance(width, int) else None


def bounded(coros: list[Coroutine[Any, Any, T]], width: int) -> list[Coroutine[Any, Any, T]]:
    """``coros`` wrapped so that at most ``width`` of them run at once, started in order."""
    slots = asyncio.Semaphore(width)

    async def one(coro: Coroutine[Any, Any, T]) -> T:
        try:
            async with slots:
                return await coro
        finally:
            coro.close()  # cancelled before its turn: never started, closed without a warning

    return [one(c) for c in coros]


async def run_together(
    coros: list[Coroutine[Any, Any, T]], *, timeout: float | None = None
) -> tuple[list[T | None], bool]:
    """Run ``coros`` at once; their results in order, None for one cancelled, and whether
    the time ran out: after ``timeout`` seconds (None: no limit), every one still
    running is cancelled, and has ended (its own ``finally`` run) when this returns."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    pending: set[asyncio.Future[T]] = set(tasks)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    late = False
    try:
        while pending:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                late = True
                break
            _, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
    finally:
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
    results: list[T | None] = []
    for t in tasks:
        if t.cancelled():
            results.append(None)
        elif (exc := t.exception()) is not None:
            raise exc
        else:
            results.append(t.result())
    return results, late

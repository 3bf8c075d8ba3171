"""``config["max_concurrency"]``: at most N tasks of a step run at once.

LangChain's ``RunnableConfig`` key, as LangGraph reads it: a step of many tasks (a fan
out of ``Send``s, parallel branches) starts them in order, at most ``max_concurrency``
at a time; the next one starts when one ends. Unset (or ``None``), every task of a step
runs at once. The step still ends when all its tasks have ended, and its writes are
committed together, as without a limit.
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

"""A run started as a task of the loop, handed back with its ids before its first step
(the run service's ``start``)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from oncegraph.runs.context import STARTED, RunResult
from oncegraph.storage.records import RunRecord


@dataclass(frozen=True, slots=True)
class RunHandle:
    """A run :meth:`RunService.start` started: its ids at once, its end with :meth:`result`."""

    run_id: str
    thread_id: str
    task: asyncio.Task[RunResult]

    async def result(self) -> RunResult:
        """How the run call ended (what :meth:`RunService.run` returns, or its error)."""
        return await self.task


async def start(call: Callable[[], Coroutine[Any, Any, RunResult]]) -> RunHandle:
    """``call()`` (a run call of the service) as a task of this loop; returns once the run
    is held and goes on (told through :data:`~oncegraph.runs.context.STARTED`), with its
    ids. A call refused before that raises here, and nothing started. Cancelled while it
    waits, it cancels the run call too (a run that started stays resumable)."""
    loop = asyncio.get_running_loop()
    known: asyncio.Future[RunRecord] = loop.create_future()

    def started(run: RunRecord) -> None:
        if not known.done():
            known.set_result(run)

    context = contextvars.copy_context()
    context.run(STARTED.set, started)
    task = loop.create_task(call(), context=context)
    either: set[asyncio.Future[Any]] = {known, task}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if not known.done():  # it ended before it went on: refused (or nothing to drive)
        started(task.result().run)
    run = known.result()
    return RunHandle(run.run_id, run.thread_id, task)


__all__ = ["RunHandle", "start"]

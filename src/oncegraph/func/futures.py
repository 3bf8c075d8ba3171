"""The futures a task call returns, and the wait that ends an entrypoint's run only
once every task call it started has ended (:mod:`oncegraph.func.tasks`).

A call made on the run's loop (an async node) is an asyncio future; one made from a
worker thread (a sync node, a sync task) a ``concurrent.futures`` future that can also
be awaited. A cancelled future cancels its call; the wait is on the calls themselves, so
a call still ending after its future was cancelled is waited for too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

# The task calls an entrypoint's run started (tasks they call included), so the node
# ends only once every one of them has ended and been recorded: nothing is recorded
# after the run's caller got its answer, and a task the function did not wait for
# (it interrupted first) is served from its record on resume.
_started: ContextVar[list[Any] | None] = ContextVar("oncegraph_task_calls", default=None)


def open_calls() -> Any:
    """Start tracking the task calls of this context (an entrypoint's run)."""
    return _started.set([])


def _pending(token: Any) -> list[Any]:
    calls = _started.get() or []
    _started.reset(token)
    return calls


def settle(token: Any) -> None:
    """Wait (in a sync node's thread) until every task call tracked since ``token``
    ended; their errors are theirs to raise where they are awaited."""
    calls = _pending(token)
    while left := [f for f in calls if not f.done()]:
        threads = [f for f in left if not isinstance(f, asyncio.Future)]
        if threads:
            concurrent.futures.wait(threads)
        for f in left:
            if isinstance(f, asyncio.Future):  # a call made on the loop by an async task
                asyncio.run_coroutine_threadsafe(_ended(f), f.get_loop()).result()


async def _ended(future: asyncio.Future[Any]) -> None:
    await asyncio.wait([future])


async def asettle(token: Any) -> None:
    """:func:`settle` on the run's loop (an async node); cancelled, it cancels them."""
    calls = _pending(token)
    while True:
        left = [f for f in calls if not f.done()]
        if not left:
            return
        waits = [f if isinstance(f, asyncio.Future) else asyncio.wrap_future(f) for f in left]
        try:
            await asyncio.wait(waits)
        except asyncio.CancelledError:
            for f in left:
                f.cancel()
            raise


class TaskFuture(concurrent.futures.Future[T]):
    """What a task call returns: ``.result()`` waits for it (from a sync node), and it can
    be awaited (from an async one). It is done once the call is recorded or served."""

    def __await__(self) -> Any:
        return asyncio.wrap_future(self).__await__()


class _AsyncTaskFuture(asyncio.Future[T]):
    """A task call made on the run's loop (an async node): await it; ``.result()`` once
    it is done, as LangGraph allows."""


def on_loop(
    loop: asyncio.AbstractEventLoop, work: Awaitable[Any]
) -> tuple[_AsyncTaskFuture[Any], asyncio.Future[Any]]:
    future: _AsyncTaskFuture[Any] = _AsyncTaskFuture(loop=loop)
    running = asyncio.ensure_future(work)
    _chain(running, future)
    return future, running


def from_thread(
    loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, Any]
) -> tuple[TaskFuture[Any], concurrent.futures.Future[Any]]:
    future: TaskFuture[Any] = TaskFuture()
    inner = asyncio.run_coroutine_threadsafe(work, loop)
    _chain(inner, future)
    return future, inner


_AnyFuture = asyncio.Future[Any] | concurrent.futures.Future[Any]


def _chain(source: _AnyFuture, future: _AnyFuture) -> None:
    """``future`` ends as ``source`` ends (its value, its error or cancelled), unless the
    caller cancelled it first; cancelling ``future`` cancels ``source``."""

    def done(f: _AnyFuture) -> None:
        if future.done():  # the caller cancelled it first
            return
        if f.cancelled():
            future.cancel()
            if isinstance(future, concurrent.futures.Future):
                future.set_running_or_notify_cancel()  # wakes its waiters
        elif (error := f.exception()) is not None:
            future.set_exception(error)
        else:
            future.set_result(f.result())

    source.add_done_callback(done)
    future.add_done_callback(lambda f: source.cancel() if f.cancelled() else None)


def track(call: Any) -> None:
    """Count ``call`` among the calls of the entrypoint run in progress, if any."""
    calls = _started.get()
    if calls is not None:
        calls.append(call)


__all__ = ["TaskFuture", "asettle", "from_thread", "on_loop", "open_calls", "settle", "track"]

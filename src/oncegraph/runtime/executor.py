"""The thread pool that runs sync nodes and tools: dedicated, sized, named, accounted.

Sync nodes and tools must not block the event loop, so they run here (``inline=True``
opts out). The pool is one per process, grown on demand up to ``max_workers`` threads
named ``oncegraph-worker-N``; :func:`configure` raises the size (a worker process sets
it to at least its concurrency). Threads are daemons: a call still running when the
interpreter exits does not hold the exit up (its effect stays ``pending``, an unknown
outcome the ledger knows how to treat).

:func:`submit` returns a :class:`concurrent.futures.Future` that ends when the THREAD
ends, which is what the ledger needs after a timeout: an ``asyncio`` wrapper of it can
be given up on without pretending the call stopped. :func:`busy` counts the calls
running now, so a timed-out call's thread is accounted for, not leaked silently.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

DEFAULT_THREADS = 64
_STOP: Any = object()


class ThreadPool:
    """A minimal pool of daemon threads (see the module docstring)."""

    def __init__(self, max_workers: int, name: str = "oncegraph-worker") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._busy = 0

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn()`` in a pool thread, in a copy of the caller's context."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        context = contextvars.copy_context()
        with self._lock:
            self._queue.put((future, context, fn))
            if self._idle > 0:
                self._idle -= 1
            elif self._threads < self.max_workers:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self.name}-{self._threads}", daemon=True
                ).start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, context, fn = item
            if future.set_running_or_notify_cancel():
                with self._lock:
                    self._busy += 1
                try:
                    future.set_result(context.run(fn))
                except BaseException as exc:
                    future.set_exception(exc)
                finally:
                    with self._lock:
                        self._busy -= 1
            with self._lock:
                self._idle += 1


_pool_lock = threading.Lock()
_pool: ThreadPool | None = None


def pool() -> ThreadPool:
    """The process's pool (``ONCEGRAPH_THREADS`` threads at most, default 64)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPool(int(os.environ.get("ONCEGRAPH_THREADS", DEFAULT_THREADS)))
        return _pool


def configure(max_workers: int) -> None:
    """Let the pool grow to at least ``max_workers`` threads (it never shrinks)."""
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, got {max_workers}")
    current = pool()
    with current._lock:
        current.max_workers = max(current.max_workers, max_workers)


def submit(fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    return pool().submit(fn)


def busy() -> int:
    """Sync nodes and tools running in the pool right now."""
    return pool().busy


__all__ = ["DEFAULT_THREADS", "ThreadPool", "busy", "configure", "pool", "submit"]

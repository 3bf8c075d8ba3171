"""One resource per running event loop (a connection pool, a client), and the home loop.

asyncio drivers bind their pools and clients to the loop they were opened on, and an
oncegraph store serves several loops at once: the sync facade's loop thread and the
user's own loop. :class:`LoopBound` keeps one resource per loop.

Invariants:

* A loop gets at most one resource: creation is serialized per loop (an
  :class:`asyncio.Lock` per loop for async openers, the thread lock for sync ones), and
  a resource whose opener failed is never stored.
* The bookkeeping dicts are guarded by a :class:`threading.Lock` that is never held
  across an await, so loops in several threads may use one object.
* Entries of closed loops are dropped when a new resource is created; such a resource
  cannot be closed on its loop any more: it is handed to ``orphan`` (if given), which
  releases what it can without a loop, and is otherwise left to the garbage collector.
* :meth:`aclose_all` forgets every resource first, then closes each on its own loop:
  here if it is the current loop, through that loop's thread if it runs elsewhere;
  otherwise (closed, or idle while another loop runs in this thread) it is dropped.

:func:`home_loop` is the one event loop that lives as long as the process, on a daemon
thread: the sync facade runs there, and so does what must outlive a caller's own loop
(the PostgreSQL lock of a run whose call outlived it, and the recording of that call).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Closer = Callable[[T], Coroutine[Any, Any, Any]]


_home_lock = threading.Lock()
_home: asyncio.AbstractEventLoop | None = None
_home_closers: weakref.WeakSet[Any] = weakref.WeakSet()
_EXIT_SECONDS = 5.0


def close_at_exit(owner: Any) -> None:
    """At interpreter exit, ``await owner.aclose_home()`` on the home loop (weakly held).

    Stores register when they open a resource on the home loop, so a program that never
    closes them still exits cleanly: no task of theirs is left pending, no connection is
    dropped without a goodbye.
    """
    _home_closers.add(owner)


@atexit.register
def _shut_home() -> None:
    """Close what lives on the home loop, end its tasks, stop it (bounded in time)."""
    loop = _home
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def shutdown() -> None:
        for owner in list(_home_closers):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(owner.aclose_home(), _EXIT_SECONDS)
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_EXIT_SECONDS)

    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(2 * _EXIT_SECONDS + 1)
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(loop.stop)


def home_loop() -> asyncio.AbstractEventLoop:
    """The process's home loop (started on first use; see the module docstring)."""
    global _home
    with _home_lock:
        if _home is None or _home.is_closed():
            _home, _ = loop_thread("oncegraph-portal")
        return _home


def loop_thread(name: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A new event loop running forever on a daemon thread called ``name``, returned
    once it runs (stop it with ``loop.call_soon_threadsafe(loop.stop)``)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    thread = threading.Thread(target=serve, name=name, daemon=True)
    thread.start()
    ready.wait()
    return loop, thread


def home_loop_if_running() -> asyncio.AbstractEventLoop | None:
    """The home loop if it has been started and still runs (never starts it)."""
    loop = _home
    return loop if loop is not None and loop.is_running() else None


def is_home(loop: asyncio.AbstractEventLoop | None) -> bool:
    return loop is not None and loop is _home


def submit_home(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the home loop from any thread, without waiting for it."""
    return asyncio.run_coroutine_threadsafe(coro, home_loop())


async def on_home(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` run on the home loop (directly when already there)."""
    if is_home(running_loop()):
        return await coro
    return await asyncio.wrap_future(submit_home(coro))


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running loop of this thread, or None outside a loop."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def close_on(
    loop: asyncio.AbstractEventLoop,
    current: asyncio.AbstractEventLoop | None,
    coro: Coroutine[Any, Any, Any],
) -> None:
    """Await ``coro`` on ``loop``: here if current, else via that loop's thread if it runs.

    A loop that is closed, or idle while another loop runs in this thread, cannot run
    it; the coroutine is then closed unawaited.
    """
    if loop is current:
        await coro
    elif loop.is_running():
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
    else:
        coro.close()


class LoopBound(Generic[T]):
    """Get-or-create one ``T`` per running event loop; close one or all of them."""

    __slots__ = ("_items", "_lock", "_opening", "_orphan")

    def __init__(self, orphan: Callable[[T], None] | None = None) -> None:
        self._items: dict[asyncio.AbstractEventLoop, T] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._lock = threading.Lock()
        self._orphan = orphan

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def peek(self) -> T | None:
        """The running loop's resource, or None if it has none yet (no creation)."""
        return self._items.get(asyncio.get_running_loop())

    def get(self, create: Callable[[], T]) -> T:
        """The running loop's resource, made by ``create()`` (sync, no I/O) on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            item = self._items.get(loop)
            if item is None:
                self._forget_closed_loops()
                item = create()
                self._items[loop] = item
            return item

    async def aget(self, open: Callable[[], Awaitable[T]]) -> T:
        """The running loop's resource, made by ``await open()`` on first use.

        Concurrent first calls in one loop wait for a single ``open()``; if it raises,
        nothing is stored and the next call tries again.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            item = self._items.get(loop)
            if item is not None:
                return item
            self._forget_closed_loops()
            opening = self._opening.setdefault(loop, asyncio.Lock())
        async with opening:
            item = self._items.get(loop)
            if item is not None:
                return item
            item = await open()
            with self._lock:
                self._items[loop] = item
            return item

    async def aclose_current(
        self, close: Closer[T], *, suppress: tuple[type[BaseException], ...] = ()
    ) -> None:
        """Forget and close the running loop's resource, if it has one."""
        loop = asyncio.get_running_loop()
        with self._lock:
            item = self._items.pop(loop, None)
            self._opening.pop(loop, None)
        if item is not None:
            with contextlib.suppress(*suppress):
                await close(item)

    async def aclose_all(
        self, close: Closer[T], *, suppress: tuple[type[BaseException], ...] = ()
    ) -> None:
        """Forget every resource, then close each on its own loop where that is possible.

        Errors of the types in ``suppress`` (and RuntimeError from a loop that stopped
        meanwhile) are swallowed so one bad resource never keeps the others open.
        """
        with self._lock:
            items = list(self._items.items())
            self._items.clear()
            self._opening.clear()
        current = running_loop()
        for loop, item in items:
            if loop.is_closed():
                self._abandon(item)
                continue
            with contextlib.suppress(*suppress, RuntimeError):
                await close_on(loop, current, close(item))

    def _abandon(self, item: T) -> None:
        if self._orphan is not None:
            with contextlib.suppress(Exception):
                self._orphan(item)

    def _forget_closed_loops(self) -> None:
        """Drop entries of closed loops. Call under the lock."""
        for old in [lp for lp in self._items if lp.is_closed()]:
            self._abandon(self._items.pop(old))
            self._opening.pop(old, None)
        for old in [lp for lp in self._opening if lp.is_closed()]:
            del self._opening[old]


__all__ = [
    "LoopBound",
    "close_at_exit",
    "close_on",
    "home_loop",
    "home_loop_if_running",
    "is_home",
    "loop_thread",
    "on_home",
    "running_loop",
    "submit_home",
]

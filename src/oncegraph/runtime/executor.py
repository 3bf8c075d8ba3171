"""The thread pool that runs sync nodes and tools: dedicated, sized, named, accounted.

Sync nodes and tools must not block the event loop, so they run here (``inline=True``
opts out), never on asyncio's default executor (``min(32, cores + 4)`` threads, whatever
the worker's concurrency). A pool grows on demand up to ``max_workers`` threads named
``oncegraph-sync-N``. Idle threads park; a call wakes one only when no thread is awake,
or when every awake thread has been in its call for :data:`HANDOFF_WAIT` (so N slow calls
still run at once, each within about a millisecond), and fast calls of many runs are taken
by the threads already awake: a wake-up costs context switches and a GIL hand-off, and at
64 concurrent runs waking one thread per call cost more CPU than the calls.

There is one process pool (``ONCEGRAPH_THREADS`` threads, default
:data:`DEFAULT_THREADS`; a worker grows it to its concurrency); an app compiled with
``sync_threads=N`` gets a pool of its own, which its runs use (:func:`use` sets it for a
run's tasks). Threads are daemons: a call still running when the interpreter exits does
not hold the exit up (its effect stays ``pending``, an unknown outcome the ledger knows
how to treat).

:meth:`ThreadPool.submit` returns a :class:`ThreadCall`, a handle that ends when the THREAD
ends, which is what the ledger needs after a timeout: an ``asyncio`` waiter of it can be
given up on without pretending the call stopped. It is the pool's own (a
:class:`concurrent.futures.Future` builds a ``threading.Condition`` per call, a
noticeable part of a sync call's cost on the loop thread); :meth:`ThreadCall.to_future`
makes one for code that takes a :class:`concurrent.futures.Future`.

Invariants (a timed-out call's thread is accounted for, not leaked silently):

* A call whose waiter gave up (its timeout, and grace, elapsed) is reported with
  :meth:`ThreadPool.abandon`: it counts as *stuck* until its thread ends, a warning names
  it, and :meth:`ThreadPool.stats` lists it.
* A stuck thread does not take a slot from new calls: the pool may grow by one thread
  per stuck call, so ``max_workers`` threads stay free for calls that are waited on.
* That growth is bounded: once ``max_stuck`` calls are stuck (default ``max_workers``),
  :meth:`ThreadPool.check_room` refuses new sync calls with
  :class:`~oncegraph.errors.SyncThreadsExhaustedError`, before the call (and before its
  own intent commit), naming the stuck calls and the fix.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import SyncThreadsExhaustedError

log = logging.getLogger("oncegraph.executor")

DEFAULT_THREADS = 64
THREAD_NAME = "oncegraph-sync"
# How long a call queued while other calls run waits for one of their threads before
# another thread is woken for it (see ThreadPool.submit).
HANDOFF_WAIT = 0.001

# a ThreadCall's states: only its pool thread moves it on (PENDING -> RUNNING -> FINISHED,
# or PENDING -> CANCELLED when its waiter was cancelled before the call started)
_PENDING = 0
_RUNNING = 1
_CANCELLED = 2
_FINISHED = 3


class ThreadCall:
    """One call queued for (or running in, or ended in) a pool thread, and the handle that
    ends when the THREAD ends: :meth:`done` once its function returned or raised, or once
    it was skipped because its waiter was cancelled before it started (then
    :meth:`cancelled`). Thread-safe for what it offers: only the pool thread changes its
    state, and a callback added is run exactly once, by the pool thread when the call
    ends or at once when it already has (state and callbacks change under the pool's
    lock)."""

    __slots__ = (
        "_callbacks",
        "_error",
        "_lock",
        "_result",
        "_state",
        "context",
        "fn",
        "queued",
        "waiter",
    )

    def __init__(
        self,
        fn: Callable[[], Any],
        context: contextvars.Context,
        waiter: asyncio.Future[Any] | None,
        lock: threading.Lock,
    ) -> None:
        self.queued = time.monotonic()
        self.fn: Callable[[], Any] | None = fn
        self.context: contextvars.Context | None = context
        self.waiter = waiter
        self._lock = lock
        self._state = _PENDING
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[ThreadCall], object]] | None = None

    def done(self) -> bool:
        """The call ended (returned or raised), or was skipped (:meth:`cancelled`)."""
        return self._state >= _CANCELLED

    def cancelled(self) -> bool:
        """Skipped: its waiter was cancelled before the call started."""
        return self._state == _CANCELLED

    def add_done_callback(self, fn: Callable[[ThreadCall], object]) -> None:
        """Call ``fn(self)`` once the call has ended: in the pool thread when it ends, at
        once (in this thread) when it already has."""
        with self._lock:
            if self._state < _CANCELLED:
                if self._callbacks is None:
                    self._callbacks = [fn]
                else:
                    self._callbacks.append(fn)
                return
        _run_callback(fn, self)

    def result(self, timeout: float | None = None) -> Any:
        """What the call returned (its exception raised), waiting at most ``timeout``
        seconds (None: no limit) in this thread: :class:`TimeoutError` after that,
        :class:`concurrent.futures.CancelledError` for a skipped call."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What the call raised (None when it returned), waiting like :meth:`result`."""
        if self._state < _CANCELLED:
            ended = threading.Event()
            self.add_done_callback(lambda _: ended.set())
            if not ended.wait(timeout):
                raise TimeoutError(f"the call did not end within {timeout}s")
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        return self._error

    def to_future(self) -> concurrent.futures.Future[Any]:
        """A :class:`concurrent.futures.Future` that ends as this call does (cancelled when
        it was skipped); cancelling it does not touch the call."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def copy(call: ThreadCall) -> None:
            if call._state == _CANCELLED:
                future.cancel()
            elif future.set_running_or_notify_cancel():
                if call._error is None:
                    future.set_result(call._result)
                else:
                    future.set_exception(call._error)

        self.add_done_callback(copy)
        return future

    def _end(self, state: int) -> list[Callable[[ThreadCall], object]] | None:
        """With the pool's lock held: the call ended (or was skipped); the callbacks to
        run (outside the lock). What it still refers to is let go (its loop, context)."""
        self._state = state
        self.fn = self.context = self.waiter = None
        callbacks, self._callbacks = self._callbacks, None
        return callbacks


def _run_callback(fn: Callable[[ThreadCall], object], call: ThreadCall) -> None:
    try:
        fn(call)
    except Exception:
        log.exception("a callback of a sync call's end raised")


@dataclass(frozen=True, slots=True)
class SyncPoolStats:
    """A pool's numbers now: its size, live threads, calls running, calls stuck (still
    running after their waiter gave up) and what they are, and calls waiting for a thread."""

    max_workers: int
    threads: int
    busy: int
    stuck: int
    stuck_calls: tuple[str, ...]
    queued: int


class ThreadPool:
    """A minimal pool of daemon threads (see the module docstring)."""

    def __init__(
        self, max_workers: int, name: str = THREAD_NAME, *, max_stuck: int | None = None
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self.max_stuck = max_stuck
        self.name = name
        self._items: collections.deque[ThreadCall] = collections.deque()
        self._lock = threading.Lock()
        self._threads = 0
        self._active = 0  # threads running calls or woken to take one (not parked)
        self._parked: list[threading.Lock] = []  # parked threads' wake locks, last in first
        # loops with a nudge due, by id (a WeakSet's membership test is Python code, read on
        # every call), weakly: a loop closed before its nudge ran is not kept, and its entry
        # goes with it (before its id can be another loop's)
        self._nudging: dict[int, weakref.ref[asyncio.AbstractEventLoop]] = {}
        self._busy = 0
        self._calls: dict[threading.Lock, float] = {}  # a working thread -> its call's start
        self._started = 0  # threads ever started (names stay unique)
        self._stuck: dict[ThreadCall, str] = {}

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def stuck(self) -> int:
        """Calls still running after their waiter gave up on them."""
        return len(self._stuck)

    def _stuck_limit(self) -> int:
        return self.max_stuck if self.max_stuck is not None else self.max_workers

    def _limit(self) -> int:
        """Threads the pool may have now: its size, plus one per stuck call (bounded)."""
        return self.max_workers + min(len(self._stuck), self._stuck_limit())

    def stats(self) -> SyncPoolStats:
        with self._lock:
            return SyncPoolStats(
                self.max_workers,
                self._threads,
                self._busy,
                len(self._stuck),
                tuple(sorted(self._stuck.values())),
                len(self._items),
            )

    def resize(self, max_workers: int) -> None:
        """Let the pool grow to at least ``max_workers`` threads (it never shrinks)."""
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        with self._lock:
            self.max_workers = max(self.max_workers, max_workers)

    def check_room(self, what: str) -> None:
        """Refuse a new sync call (``what``: ``"tool 'x'"``) when too many are stuck."""
        if not self._stuck:  # the common case, read without the lock (a dict's size)
            return
        with self._lock:
            stuck = len(self._stuck)
            if stuck < self._stuck_limit():
                return
            names = ", ".join(sorted(set(self._stuck.values())))
        raise SyncThreadsExhaustedError(
            f"{what} was not started: {stuck} sync call(s) are still running after their "
            f"timeout ({names}) and this pool of {self.max_workers} thread(s) lets no more "
            "threads be stuck. It was not called; the run can be resumed once they end. "
            "Make those calls honour a timeout (or make them async, so they can be "
            "cancelled), or give the pool more threads: compile(..., sync_threads=N) or "
            "ONCEGRAPH_THREADS."
        )

    def submit(
        self, fn: Callable[[], Any], *, waiter: asyncio.Future[Any] | None = None
    ) -> ThreadCall:
        """Run ``fn()`` in a pool thread, in a copy of the caller's context.

        ``waiter``: a future of the calling thread's running loop (:meth:`start` makes
        one), which the pool thread settles itself, with one
        ``call_soon_threadsafe`` once the call has ended (cheaper than chaining it to the
        returned future with ``asyncio.wrap_future``); cancelled before the call starts,
        the call is not made. The returned :class:`ThreadCall` ends when the THREAD ends.

        Which thread takes it: when no thread is working, one is woken (or started) at
        once. When some are, the call is queued for them, and a nudge on the waiter's loop
        :data:`HANDOFF_WAIT` later wakes one more thread per call still waiting then: fast
        calls from many runs are taken by the threads already awake (a wake-up costs two
        context switches and a GIL hand-off), slow ones still each get a thread within
        about a millisecond."""
        call = ThreadCall(fn, contextvars.copy_context(), waiter, self._lock)
        loop = waiter.get_loop() if waiter is not None else None
        nudge = False
        with self._lock:
            self._items.append(call)
            if self._active == 0 or loop is None:
                self._wake(1)
            elif id(loop) not in self._nudging:
                self._nudge_due(loop)
                nudge = True
        if nudge:
            assert loop is not None
            loop.call_later(HANDOFF_WAIT, self._nudge, loop)
        return call

    def _wake(self, n: int) -> int:  # with self._lock held
        """Wake (or start, within the pool's size) up to ``n`` threads; how many."""
        woken = 0
        limit = self._limit()
        while woken < n:
            if self._parked:
                self._active += 1
                self._parked.pop().release()
            elif self._threads < limit:
                self._active += 1
                self._start_thread()
            else:
                break
            woken += 1
        return woken

    def _nudge_due(self, loop: asyncio.AbstractEventLoop) -> None:  # with self._lock held
        key = id(loop)
        nudging = self._nudging
        nudging[key] = weakref.ref(loop, lambda _: nudging.pop(key, None))

    def _nudge(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: calls are queued. When every awake thread is in a call that began
        :data:`HANDOFF_WAIT` ago or more (a slow call), wake a thread for each queued
        call that has waited that long; while an awake thread is free or in a short call
        (or only waiting for the GIL), it takes them. Looks again while calls are queued."""
        again = False
        with self._lock:
            self._nudging.pop(id(loop), None)
            if self._items:
                due = time.monotonic() - HANDOFF_WAIT * 0.9
                slow = sum(1 for began in self._calls.values() if began <= due)
                woke = 0
                if slow >= self._active:
                    woke = self._wake(sum(1 for call in self._items if call.queued <= due))
                # calls still queued: look again, unless no thread can be had (then the
                # threads take them as they end their calls)
                capped = not self._parked and self._threads >= self._limit()
                again = len(self._items) > woke and not capped
                if again:
                    self._nudge_due(loop)
        if again and not loop.is_closed():
            loop.call_later(HANDOFF_WAIT, self._nudge, loop)

    def start(self, fn: Callable[[], Any]) -> tuple[ThreadCall, asyncio.Future[Any]]:
        """Run ``fn()`` in a pool thread: (the handle that ends with the thread, a future
        of the running loop to await)."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        return self.submit(fn, waiter=waiter), waiter

    def _start_thread(self) -> None:  # with self._lock held
        self._threads += 1
        self._started += 1
        wake = threading.Lock()
        wake.acquire()  # held while the thread works; it parks by acquiring it again
        threading.Thread(
            target=self._work, args=(wake,), name=f"{self.name}-{self._started}", daemon=True
        ).start()

    def abandon(self, future: ThreadCall, what: str) -> None:
        """The waiter of ``future`` gave up (a timeout): if its call still runs, count its
        thread as stuck until it ends, and say so. ``what`` names it (``"tool 'x'"``)."""
        with self._lock:
            if future.done() or future in self._stuck:
                return
            self._stuck[future] = what
            stuck = len(self._stuck)
            # its thread is taken: let one more take the calls waiting for one
            if self._items and stuck <= self._stuck_limit():
                self._wake(1)
        log.warning(
            "sync %s is still running after its timeout; its thread cannot be stopped and is "
            "counted as stuck until it ends (%d stuck in pool %s of %d threads)",
            what,
            stuck,
            self.name,
            self.max_workers,
        )
        future.add_done_callback(self._unstuck)

    def _unstuck(self, future: ThreadCall) -> None:
        with self._lock:
            what = self._stuck.pop(future, None)
            stuck = len(self._stuck)
        if what is not None:
            log.info("stuck sync %s ended (%d still stuck)", what, stuck)

    def _work(self, wake: threading.Lock) -> None:
        """Take calls until none is queued, then park until woken (or end, when the pool
        grew for stuck calls that have ended since)."""
        while True:
            with self._lock:
                call = self._items.popleft() if self._items else None
                if call is None:
                    self._active -= 1
                    if self._threads > self.max_workers + len(self._stuck):
                        self._threads -= 1  # over its size: shed
                        return
                    self._parked.append(wake)
            if call is None:
                wake.acquire()  # parked: _wake releases it (and counted us active)
                continue
            self._run(wake, call)
            call = None  # a parked thread keeps nothing of its last call

    def _run(self, me: threading.Lock, call: ThreadCall) -> None:
        waiter, context, fn = call.waiter, call.context, call.fn
        assert context is not None and fn is not None
        if waiter is not None and waiter.cancelled():
            with self._lock:  # skipped: never made
                callbacks = call._end(_CANCELLED)
            if callbacks:
                for callback in callbacks:
                    _run_callback(callback, call)
            return
        call._state = _RUNNING
        with self._lock:
            self._busy += 1
            self._calls[me] = time.monotonic()
        result: Any = None
        error: BaseException | None = None
        try:
            result = context.run(fn)
        except BaseException as exc:
            error = exc
        context = fn = None
        # the thread's call ends first: a waiter woken finds it ended
        with self._lock:
            self._busy -= 1
            del self._calls[me]
            call._result = result
            call._error = error
            callbacks = call._end(_FINISHED)
        if callbacks:
            for callback in callbacks:
                _run_callback(callback, call)
        if waiter is not None:  # last: the loop may run at once
            _answer(waiter, result, error)


def _answer(waiter: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Settle ``waiter`` on its own loop (from a pool thread); a closed loop has nobody
    waiting."""
    try:
        waiter.get_loop().call_soon_threadsafe(_settle, waiter, result, error)
    except RuntimeError:  # the loop is closed
        pass


def _settle(waiter: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if waiter.done():  # cancelled: its waiter gave up
        return
    if error is None:
        waiter.set_result(result)
    else:
        waiter.set_exception(error)


_pool_lock = threading.Lock()
_pool: ThreadPool | None = None
_current: contextvars.ContextVar[ThreadPool | None] = contextvars.ContextVar(
    "oncegraph_sync_pool", default=None
)


def pool() -> ThreadPool:
    """The process's pool (``ONCEGRAPH_THREADS`` threads at most, default 64)."""
    global _pool
    made = _pool
    if made is not None:  # made once; read without the lock on every sync call
        return made
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPool(int(os.environ.get("ONCEGRAPH_THREADS", DEFAULT_THREADS)))
        return _pool


def current() -> ThreadPool:
    """The pool of the run this code is part of (its app's), else the process pool."""
    return _current.get() or pool()


def use(chosen: ThreadPool | None) -> contextvars.Token[ThreadPool | None]:
    """Make ``chosen`` the pool of this context (a run's driver); reset with the token."""
    return _current.set(chosen)


def reset(token: contextvars.Token[ThreadPool | None]) -> None:
    _current.reset(token)


def configure(max_workers: int) -> None:
    """Let the process pool grow to at least ``max_workers`` threads (it never shrinks)."""
    pool().resize(max_workers)


def submit(fn: Callable[[], Any]) -> ThreadCall:
    return current().submit(fn)


def start(fn: Callable[[], Any]) -> tuple[ThreadCall, asyncio.Future[Any]]:
    """Run ``fn()`` in the current pool: (the thread's call, a waiter of this loop)."""
    return current().start(fn)


def busy() -> int:
    """Sync nodes and tools running in the current pool right now."""
    return current().busy


__all__ = [
    "DEFAULT_THREADS",
    "THREAD_NAME",
    "SyncPoolStats",
    "ThreadCall",
    "ThreadPool",
    "busy",
    "configure",
    "current",
    "pool",
    "reset",
    "start",
    "submit",
    "use",
]

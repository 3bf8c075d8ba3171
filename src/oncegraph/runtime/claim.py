"""A run held by this process: its liveness lock, its fencing token, its calls in flight.

Guarantee 13: an attempt that may still be running is never followed by another attempt of
the same effect, and a writer that lost the run writes nothing. The run service takes a
:class:`Claim` before any work on a run (a liveness lock that dies with this process,
plus a fencing token every write carries) and releases it when the run stops.

Invariants:

* New attempts start only while the claim is ``open``: :meth:`Claim.check_open` raises
  once the run has stopped (a sync node abandoned by a timeout cannot start an effect
  after its caller got an answer) or the lock may have been lost. A lost lock is not the
  node's failure: the task stops as a crashed holder does (:mod:`oncegraph.runtime.tasks`)
  and the run is claimed again.
* A call that outlived its waiter (a sync tool's thread after its timeout and grace, a
  coroutine that ignored cancellation) is *kept*: the claim, and so the run's lock, is
  held until the call ends and its outcome is recorded, so no one else can start
  another attempt of that effect meanwhile. :meth:`Claim.release` then happens when the
  last kept call ends. A thread's outcome is recorded on the portal loop
  (:func:`oncegraph.runtime.portal.submit`), which lives as long as the process: the
  run's own loop may be gone by then (``asyncio.run`` returned). For the same reason a
  run that stops with a kept thread first moves its lock where it outlives that loop
  (:meth:`~oncegraph.storage.protocols.LoopBoundLock.outlive_loop`), before anyone may
  let it go.
* The claim's bookkeeping is guarded by a :class:`threading.Lock`, since a kept call may
  end on another loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from oncegraph.errors import LeaseLostError, RunClosedError
from oncegraph.storage.protocols import LoopBoundLock

if TYPE_CHECKING:
    from oncegraph.storage.protocols import RunLock

log = logging.getLogger("oncegraph.claim")

SETTLE_SECONDS = 2.0  # how long a stopping run waits for a cancelled coroutine to end


class Ended(Protocol):
    """A finished call, asyncio's or a thread's: both futures answer these."""

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def result(self) -> Any: ...


OnEnd = Callable[[Ended], Awaitable[None]]


def default_owner() -> str:
    """``host:pid:random``: who holds a run, readable in the runs table."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Claim:
    """See the module docstring. ``token`` is the fencing token every write carries."""

    def __init__(self, run_id: str, token: int, lock: RunLock | None) -> None:
        self.run_id = run_id
        self.token = token
        self._lock = lock
        self._open = True
        self._release_asked = False
        self._kept: set[object] = set()
        self._threads: set[object] = set()  # kept calls that are threads (cannot be stopped)
        self._tasks: set[asyncio.Task[None]] = set()
        self._guard = threading.Lock()

    @property
    def lost(self) -> bool:
        return self._lock is not None and self._lock.lost

    @property
    def in_flight(self) -> int:
        """Calls that outlived their waiter and have not ended yet."""
        return len(self._kept)

    def check_open(self) -> None:
        """Raise unless a new attempt may start under this claim."""
        if self.lost:
            raise LeaseLostError(
                f"run {self.run_id}: the connection holding its lock broke (the database "
                "restarted, or the session was ended), so another process may hold it now; "
                "no new attempt is started here and the run is left as it is, not failed. "
                "A worker claims it again once its lease runs out; without workers, "
                "continue it with app.resume(run_id, ...) or invoke(None, config)."
            )
        if not self._open:
            raise RunClosedError(
                f"run {self.run_id} has already stopped (its caller got an answer); an "
                "effect started after that is not sent."
            )

    def keep(
        self,
        call: asyncio.Future[Any],
        on_end: OnEnd,
        *,
        thread: concurrent.futures.Future[Any] | None = None,
    ) -> None:
        """Hold the claim until the call ends, then ``await on_end(ended)`` (record it).

        ``thread``: the call runs in a pool thread; its own future is watched (and the
        outcome recorded on the portal loop), not the asyncio wrapper ``call``.
        """
        with self._guard:
            self._kept.add(call)
            if thread is not None:
                self._threads.add(call)
        if thread is not None:
            from oncegraph.runtime import portal

            thread.add_done_callback(lambda done: portal.submit(self._ended(call, done, on_end)))
            return
        loop = asyncio.get_running_loop()

        def ended(fut: asyncio.Future[Any]) -> None:
            task = loop.create_task(
                self._ended(call, fut, on_end), name=f"oncegraph-kept-{self.run_id}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        call.add_done_callback(ended)

    async def _ended(self, key: object, done: Ended, on_end: OnEnd) -> None:
        try:
            await on_end(done)
        except Exception as exc:  # the claim must still be let go
            log.warning(
                "run %s: a call that outlived its step ended; recording it failed: %s",
                self.run_id,
                exc,
            )
        finally:
            with self._guard:
                self._kept.discard(key)
                self._threads.discard(key)
                last = self._release_asked and not self._kept
            if last:
                await self._let_go()

    async def release(self) -> None:
        """The run stopped: no new attempts; the lock goes once no call is kept."""
        with self._guard:
            self._open = False
            threads = len(self._threads)
        if threads:  # a thread may outlive this loop: so must the lock (nobody lets go yet)
            await self._outlive_loop()
        await self._settle_coroutines()
        with self._guard:
            self._release_asked = True
            kept, threads = len(self._kept), len(self._threads)
        if not kept:
            await self._let_go()
        else:  # a cancelled coroutine ends at once; a thread may take its time
            log.log(
                logging.WARNING if threads else logging.DEBUG,
                "run %s stopped with %d call(s) still running; it stays held by this process "
                "until they end and are recorded",
                self.run_id,
                kept,
            )

    async def _settle_coroutines(self) -> None:
        """Let kept coroutines that are ending (cancelled, in their ``finally``) end, and
        their outcomes be recorded, before the run answers: the caller then reads every
        call's record. A coroutine that ignores cancellation for longer is left kept."""
        loop = asyncio.get_running_loop()
        with self._guard:
            ours = [
                c
                for c in self._kept
                if c not in self._threads
                and isinstance(c, asyncio.Future)
                and c.get_loop() is loop
            ]
        if ours:
            await asyncio.wait(ours, timeout=SETTLE_SECONDS)
            await asyncio.sleep(0)  # the done-callbacks start their recordings
        recording = [t for t in self._tasks if t.get_loop() is loop]
        if recording:
            await asyncio.wait(recording, timeout=SETTLE_SECONDS)

    async def _outlive_loop(self) -> None:
        lock = self._lock
        if not isinstance(lock, LoopBoundLock):
            return
        try:
            await lock.outlive_loop()
        except Exception as exc:  # still held here: it ends with this loop's session
            log.warning(
                "run %s: its lock could not be moved to outlive this event loop (%s); it "
                "is held until the call still running ends or this loop ends, whichever "
                "comes first",
                self.run_id,
                exc,
            )

    async def _let_go(self) -> None:
        with self._guard:
            lock, self._lock = self._lock, None
        if lock is not None:
            with contextlib.suppress(Exception):
                await lock.release()


__all__ = ["Claim", "default_owner"]

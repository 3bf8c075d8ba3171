"""A run held by this process: its liveness lock, its fencing token, its calls in flight.

Law 13: an attempt that may still be running is never followed by another attempt of
the same effect, and a writer that lost the run writes nothing. The run service takes a
:class:`Claim` before any work on a run (a liveness lock that dies with this process,
plus a fencing token every write carries) and releases it when the run stops.

Invariants:

* New attempts start only while the claim is ``open``: :meth:`Claim.check_open` raises
  once the run has stopped (a sync node abandoned by a timeout cannot start an effect
  after its caller got an answer) or the lock may have been lost.
* A call that outlived its waiter (a sync tool's thread after its timeout and grace, a
  coroutine that ignored cancellation) is *kept*: the claim, and so the run's lock, is
  held until the call ends and its outcome is recorded, so no one else can start
  another attempt of that effect meanwhile. :meth:`Claim.release` then happens when the
  last kept call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from oncegraph.errors import LeaseLostError, RunClosedError

if TYPE_CHECKING:
    from oncegraph.storage.protocols import RunLock

log = logging.getLogger("oncegraph.claim")

OnEnd = Callable[["asyncio.Future[Any]"], Awaitable[None]]


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
        self._kept: set[asyncio.Future[Any]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.released = asyncio.Event()

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
                f"run {self.run_id}: the connection holding its lock broke, so another "
                "process may hold it now; no new attempt is started here."
            )
        if not self._open:
            raise RunClosedError(
                f"run {self.run_id} has already stopped (its caller got an answer); an "
                "effect started after that is not sent."
            )

    def keep(self, call: asyncio.Future[Any], on_end: OnEnd) -> None:
        """Hold the claim until ``call`` ends, then ``await on_end(call)`` (record it)."""
        self._kept.add(call)
        loop = asyncio.get_running_loop()

        def ended(fut: asyncio.Future[Any]) -> None:
            task = loop.create_task(self._ended(fut, on_end), name=f"oncegraph-kept-{self.run_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        call.add_done_callback(ended)

    async def _ended(self, call: asyncio.Future[Any], on_end: OnEnd) -> None:
        try:
            await on_end(call)
        except Exception as exc:  # the claim must still be let go
            log.warning("run %s: a call that outlived its step ended; recording it failed: %s",
                        self.run_id, exc)
        finally:
            self._kept.discard(call)
            if self._release_asked and not self._kept:
                await self._let_go()

    async def release(self) -> None:
        """The run stopped: no new attempts; the lock goes once no call is kept."""
        self._open = False
        self._release_asked = True
        if not self._kept:
            await self._let_go()
        elif not self.released.is_set():
            log.warning(
                "run %s stopped with %d call(s) still running; it stays held by this process "
                "until they end and are recorded",
                self.run_id,
                len(self._kept),
            )

    async def _let_go(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            with contextlib.suppress(Exception):
                await lock.release()
        self.released.set()


__all__ = ["Claim", "default_owner"]

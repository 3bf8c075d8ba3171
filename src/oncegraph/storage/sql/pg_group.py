"""Group commit for PostgreSQL: steps that wait for each other share one transaction.

A step commit of a loop that has nothing in flight goes at once, alone, in its caller's
task (a lone run pays nothing for grouping). A step that comes while its loop has a
commit in flight joins the loop's open group, which is sent as ONE message
(:meth:`StepWriter.send_many`) at the end of that loop turn, or, while
:data:`IN_FLIGHT` messages of the loop are in flight, as soon as one of them ends:
PostgreSQL runs it as one transaction, so one pool checkout, one round trip and one WAL
flush serve all its steps, where each used to wait for a connection of its own.

Invariants:

* **Durability per run is unchanged.** A run's ``commit`` returns only once the message
  holding its step has been answered: its transaction has committed.
* **All or nothing, then each on its own.** The steps' checks (each step's thread CAS,
  its run's fence) run inside the one transaction, in the order of their run ids (the
  order a lease renewal locks run rows in, so the two cannot deadlock:
  :meth:`StepWriter.send_many`), so a step sees the steps before it. If the message
  fails (a lost CAS or fence, a duplicate row), NOTHING of it was committed, and each
  step is then sent again on its own, on the same connection, in request order: each
  gets its own answer or its own error, exactly as if it had never been grouped. A
  connection that broke is not tried again: every step of the group gets the error (its
  outcome is unknown, as for a lone commit).
* A request whose waiter was cancelled before its group was sent is left out. One sent
  is not taken back (as a lone commit in flight is not).
* At most :data:`IN_FLIGHT` messages of one loop are in flight.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from oncegraph.storage.records import StepCommit

# Commit messages of one loop in flight at once. Steps that come while both are in flight
# wait for one to end and go together. 64 concurrent one-step runs: groups of ~15 steps
# and 522-526 runs/s with 2, ~5 steps and 486-492 runs/s with no cap, 529-539 with 1,
# which cost concurrency 8 about 8% (measured while every step went through a group;
# benchmarks/README.md, round six).
IN_FLIGHT = 2


@dataclass(slots=True)
class GroupStats:
    """Groups sent (requests / groups = mean size), the largest, and the groups that
    failed as one and were sent again step by step."""

    groups: int = 0
    requests: int = 0
    largest: int = 0
    retried: int = 0


@dataclass(slots=True)
class Pending:
    """One step waiting for its group: its commit, its timestamp, its answer (how many
    of its planned intents were inserted)."""

    commit: StepCommit
    ts: float
    answer: asyncio.Future[int]


Write = Callable[[list[Pending]], Awaitable[None]]
"""Write a group and settle each request's ``answer`` (result or error)."""

WriteOne = Callable[[StepCommit, float], Awaitable[int]]
"""Write one step on its own (in the caller's task): how many planned intents it inserted."""


class _Loop:
    """One loop's groups: the one collecting steps, and how many messages are in flight."""

    __slots__ = ("in_flight", "open", "scheduled")

    def __init__(self) -> None:
        self.open: list[Pending] | None = None
        self.in_flight = 0
        self.scheduled = False


class CommitGroups:
    """Send step commits per event loop: alone when the loop has none in flight, else
    together, at most :data:`IN_FLIGHT` messages of a loop at once."""

    __slots__ = ("_loops", "_tasks", "_write", "_write_one", "stats")

    def __init__(self, write: Write, write_one: WriteOne) -> None:
        self._write = write
        self._write_one = write_one
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = (
            weakref.WeakKeyDictionary()
        )
        self._tasks: set[asyncio.Task[None]] = set()  # groups being written (held here)
        self.stats = GroupStats()

    async def commit(self, commit: StepCommit, ts: float) -> int:
        """Commit ``commit``; once it is durable, how many of its planned intents were
        inserted."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _Loop()
        if state.in_flight == 0 and state.open is None:  # alone: no wait, no task
            state.in_flight += 1
            self.stats.groups += 1
            self.stats.requests += 1
            self.stats.largest = max(self.stats.largest, 1)
            try:
                return await self._write_one(commit, ts)
            finally:
                state.in_flight -= 1
                self._next(loop, state)
        answer: asyncio.Future[int] = loop.create_future()
        if state.open is None:
            state.open = []
        state.open.append(Pending(commit, ts, answer))
        if not state.scheduled and state.in_flight < IN_FLIGHT:
            state.scheduled = True
            loop.call_soon(self._turn_ended, loop, state)
        return await answer

    def _turn_ended(self, loop: asyncio.AbstractEventLoop, state: _Loop) -> None:
        state.scheduled = False
        self._next(loop, state)

    def _next(self, loop: asyncio.AbstractEventLoop, state: _Loop) -> None:
        """Send the open group if a message may go now (else when one in flight ends)."""
        while state.open is not None and state.in_flight < IN_FLIGHT and not state.scheduled:
            group, state.open = state.open, None
            items = [p for p in group if not p.answer.cancelled()]
            if not items:
                continue
            self.stats.groups += 1
            self.stats.requests += len(items)
            self.stats.largest = max(self.stats.largest, len(items))
            state.in_flight += 1
            task = loop.create_task(self._written(items), name="oncegraph-commit-group")
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._ended, state))

    def _ended(self, state: _Loop, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        state.in_flight -= 1
        self._next(task.get_loop(), state)

    async def _written(self, items: list[Pending]) -> None:
        try:
            await self._write(items)
        except BaseException as exc:  # the write itself failed: so did every request
            for p in items:
                if p.answer.done():
                    continue
                if isinstance(exc, Exception):
                    p.answer.set_exception(exc)
                else:  # cancelled (the loop is ending): so is the wait
                    p.answer.cancel()
            if not isinstance(exc, Exception):
                raise

    async def drain(self) -> None:
        """Wait for the groups of this loop still being written (before a close)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        while state is not None and (state.open is not None or state.in_flight):
            mine = [t for t in self._tasks if t.get_loop() is loop]
            if mine:
                await asyncio.gather(*mine, return_exceptions=True)
            else:
                await asyncio.sleep(0.001)


__all__ = ["IN_FLIGHT", "CommitGroups", "GroupStats", "Pending"]

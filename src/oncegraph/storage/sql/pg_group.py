"""Group commit for PostgreSQL: step commits of one loop turn share one transaction.

Runs on one event loop that commit a step in the same turn of the loop (64 concurrent
runs, say) send their steps as ONE message (:meth:`StepWriter.send_many`), which
PostgreSQL runs as one transaction: one pool checkout, one round trip, one WAL flush for
all of them, where each used to wait for a connection of its own.

Invariants:

* **Durability per run is unchanged.** A run's ``commit`` returns only once the message
  holding its step has been answered: the implicit transaction has committed.
* **All or nothing, then each on its own.** The steps' checks (each step's thread CAS,
  its run's fence) run inside the one transaction, in request order, so a step sees the
  steps before it. If the message fails (a lost CAS or fence, a duplicate row), NOTHING
  of it was committed, and each step is then sent again on its own, on the same
  connection, in request order: each gets its own answer or its own error, exactly as if
  it had never been grouped. A connection that broke is not tried again: every step of
  the group gets the error (its outcome is unknown, as for a lone commit).
* A request whose waiter was cancelled before its group was sent is left out. One sent
  is not taken back (as a lone commit in flight is not).
* A group of one is a lone commit. At most :data:`IN_FLIGHT` groups of one loop are in
  flight; steps that come meanwhile wait for one of them to end, and go together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from oncegraph.storage.records import StepCommit

# Groups of one loop in flight at once. Steps that come while both are in flight wait for
# one to end and go together: 64 concurrent one-step runs, groups of ~15 steps, 522-526
# runs/s, against ~5 steps and 486-492 with no cap, and 529-539 with one in flight, which
# costs concurrency 8 about 8% (benchmarks/README.md, round six).
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


class CommitGroups:
    """Collect step commits per event loop; each loop turn's go to ``write`` together,
    at most :data:`IN_FLIGHT` groups of a loop at once."""

    __slots__ = ("_open", "_tasks", "_write", "stats")

    def __init__(self, write: Write) -> None:
        self._write = write
        self._open: dict[asyncio.AbstractEventLoop, list[Pending]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # groups being written (held here)
        self.stats = GroupStats()

    async def commit(self, commit: StepCommit, ts: float) -> int:
        """Commit ``commit`` in this loop turn's group; once it is durable, how many of its
        planned intents were inserted."""
        loop = asyncio.get_running_loop()
        group = self._open.get(loop)
        if group is None:
            group = self._open[loop] = []
            loop.call_soon(self._flush, loop, group)
        answer: asyncio.Future[int] = loop.create_future()
        group.append(Pending(commit, ts, answer))
        return await answer

    def _flush(self, loop: asyncio.AbstractEventLoop, group: list[Pending]) -> None:
        if self._open.get(loop) is not group:
            return
        if sum(1 for t in self._tasks if t.get_loop() is loop) >= IN_FLIGHT:
            return  # sent when a group in flight ends (it grows meanwhile)
        del self._open[loop]
        items = [p for p in group if not p.answer.cancelled()]
        if not items:
            return
        self.stats.groups += 1
        self.stats.requests += len(items)
        self.stats.largest = max(self.stats.largest, len(items))
        task = loop.create_task(self._written(items), name="oncegraph-commit-group")
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        loop = task.get_loop()
        group = self._open.get(loop)
        if group is not None:
            self._flush(loop, group)

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
        group = self._open.pop(loop, None)
        if group is not None:
            self._flush(loop, group)
        mine = [t for t in self._tasks if t.get_loop() is loop]
        if mine:
            await asyncio.gather(*mine, return_exceptions=True)


__all__ = ["IN_FLIGHT", "CommitGroups", "GroupStats", "Pending"]

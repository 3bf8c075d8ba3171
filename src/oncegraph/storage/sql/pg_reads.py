"""Shared reads for PostgreSQL: one read asked by many runs of a loop at once goes once.

A run's start reads its thread (the thread row and its latest run). A read of a loop
with no read of its kind in flight goes at once, alone, in its caller's task: a lone
run pays nothing for sharing. Reads asked while one is in flight wait for it to end and
then go together, as ONE statement over all their keys: one pool checkout, one round
trip and one snapshot for all of them, where each used to check out a connection and
send a statement of its own (about a tenth of a run's client CPU at 64 concurrent runs).

Invariants:

* **A read is never answered from before it was asked.** A waiting read goes in a
  statement sent after it was asked, so it sees every commit that ended before it was
  asked, as a lone read would. Two reads of one key in one statement get the same
  answer, from the same snapshot.
* **A failed statement fails each of its reads** with that error, as each would have
  failed alone on that connection. A read writes nothing, so nothing is sent again. A
  row that cannot be decoded (a record sealed with a key this process lacks) fails the
  reads of its key only.
* A read whose waiter was cancelled before its statement went is left out.
* At most one shared statement per loop and kind is in flight; at most
  :data:`MAX_KEYS` keys go in one (the rest wait for the next).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Raw = Any

MAX_KEYS = 500
"""The most keys one shared statement reads (an array parameter of that many)."""


@dataclass(slots=True)
class ReadStats:
    """Reads answered, statements sent for them (reads / statements = sharing), and the
    largest number of keys in one statement."""

    reads: int = 0
    statements: int = 0
    largest: int = 0


class _Loop(Generic[K, V]):
    """One loop's reads of one kind: the one in flight, and those waiting for it."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        self.busy = False
        self.waiting: list[tuple[K, asyncio.Future[V]]] = []


class SharedReads(Generic[K, V]):
    """Read by key per event loop: alone when nothing is in flight, else together.

    ``one(key)`` reads one key; ``many(keys)`` reads several distinct keys in one
    statement and answers their rows in the keys' order, each turned into an answer by
    ``decode``. See the module docstring.
    """

    __slots__ = ("_decode", "_loops", "_many", "_one", "_tasks", "stats")

    def __init__(
        self,
        one: Callable[[K], Awaitable[V]],
        many: Callable[[Sequence[K]], Awaitable[Sequence[Raw]]],
        decode: Callable[[Raw], V],
    ) -> None:
        self._one = one
        self._many = many
        self._decode = decode
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop[K, V]] = (
            weakref.WeakKeyDictionary()
        )
        self._tasks: set[asyncio.Task[None]] = set()  # shared statements being read
        self.stats = ReadStats()

    async def read(self, key: K) -> V:
        """What ``one(key)`` answers, shared with the reads asked while one is in flight."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _Loop()
        if not state.busy:  # alone: no wait, no task
            state.busy = True
            self.stats.reads += 1
            self.stats.statements += 1
            self.stats.largest = max(self.stats.largest, 1)
            try:
                return await self._one(key)
            finally:
                state.busy = False
                self._next(loop, state)
        answer: asyncio.Future[V] = loop.create_future()
        state.waiting.append((key, answer))
        return await answer

    def _next(self, loop: asyncio.AbstractEventLoop, state: _Loop[K, V]) -> None:
        """Send what waits, if anything does and nothing is in flight."""
        if state.busy:
            return
        waiting = [(k, f) for k, f in state.waiting if not f.cancelled()]
        keys = list(dict.fromkeys(k for k, _ in waiting))[:MAX_KEYS]
        chosen = set(keys)
        state.waiting = [(k, f) for k, f in waiting if k not in chosen]
        if not keys:
            return
        taken = [(k, f) for k, f in waiting if k in chosen]
        self.stats.reads += len(taken)
        self.stats.statements += 1
        self.stats.largest = max(self.stats.largest, len(keys))
        state.busy = True
        task = loop.create_task(self._read_many(keys, taken), name="oncegraph-shared-read")
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._ended, state))

    def _ended(self, state: _Loop[K, V], task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        state.busy = False
        self._next(task.get_loop(), state)

    async def _read_many(self, keys: list[K], taken: list[tuple[K, asyncio.Future[V]]]) -> None:
        try:
            found = await self._many(keys)
        except BaseException as exc:  # the statement failed: so did every read in it
            for _, answer in taken:
                if answer.done():
                    continue
                if isinstance(exc, Exception):
                    answer.set_exception(exc)
                else:  # cancelled (the loop is ending): so is the wait
                    answer.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        if len(found) != len(keys):  # a bug in ``many``: never answer a read wrongly
            error = RuntimeError(f"a shared read asked {len(keys)} keys, got {len(found)}")
            for _, answer in taken:
                if not answer.done():
                    answer.set_exception(error)
            return
        by_key = dict(zip(keys, found, strict=True))
        for key, answer in taken:
            if answer.done():
                continue
            try:
                value = self._decode(by_key[key])
            except Exception as exc:  # this key's row: this key's reads
                answer.set_exception(exc)
            else:
                answer.set_result(value)

    async def drain(self) -> None:
        """Wait until this loop's reads are answered: the one in flight and those waiting
        for it (before a close)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        while state is not None and (state.busy or state.waiting):
            mine = [t for t in self._tasks if t.get_loop() is loop]
            if mine:
                await asyncio.gather(*mine, return_exceptions=True)
            else:  # a read alone, in its caller's task
                await asyncio.sleep(0.001)


__all__ = ["MAX_KEYS", "ReadStats", "SharedReads"]

"""Bounded tries with a wait between them, as one loop::

    async for attempt in attempts(policy, sleep):
        try:
            return await write()
        except TransientError:
            if attempt.last:
                raise

``policy`` is a :class:`~oncegraph.ledger.retry.RetryPolicy` (anything with
``max_attempts`` and ``delay(n)``, the wait after try ``n``), or a sequence of fixed
waits: ``(0.05, 0.2)`` means three tries. The wait before try ``n + 1`` is slept through
``sleep`` (the run's, so tests never wait it out) only when the loop goes on to it: a
body that returns or raises on its first try sleeps nothing. A class, not an async
generator: leaving the loop early leaves nothing to finalize.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

Sleep = Callable[[float], Awaitable[object]]


class Backoff(Protocol):
    """How many tries, and the wait after try ``n`` (``n >= 1``)."""

    @property
    def max_attempts(self) -> int: ...

    def delay(self, attempt: int) -> float: ...


@dataclass(frozen=True, slots=True)
class Try:
    """One try: its ``number`` (from 1) and whether it is the ``last`` one allowed."""

    number: int
    last: bool


class attempts:  # a class named as the function it is used as
    """The tries ``policy`` allows, sleeping its wait before each one after the first."""

    __slots__ = ("_count", "_delay", "_made", "_sleep")

    def __init__(self, policy: Backoff | Sequence[float], sleep: Sleep) -> None:
        if isinstance(policy, Sequence):
            waits = tuple(policy)
            self._count = len(waits) + 1
            self._delay: Callable[[int], float] = lambda n: waits[n - 1]
        else:
            self._count = policy.max_attempts
            self._delay = policy.delay
        self._sleep = sleep
        self._made = 0

    def __aiter__(self) -> attempts:
        return self

    async def __anext__(self) -> Try:
        made = self._made
        if made >= self._count:
            raise StopAsyncIteration
        if made:
            await self._sleep(self._delay(made))
        self._made = made + 1
        return Try(made + 1, made + 1 >= self._count)


__all__ = ["Backoff", "Sleep", "Try", "attempts"]

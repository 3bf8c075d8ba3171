"""What a run emits while it runs, and how subgraphs' events reach the caller.

The driver calls ``emit(mode, payload)`` for every stream mode (``values``, ``updates``,
``debug``, ``events``; nodes add ``custom`` through ``get_stream_writer()`` and model
adapters ``messages``); the app keeps what the caller asked for. An emit function may
carry the modes it keeps (a :class:`Keeping`, made by :func:`keeping`), so the driver
skips building payloads no one reads (:func:`wants`); a plain function keeps every mode.

A subgraph's driver emits through :func:`namespaced`: each payload reaches the parent's
emit wrapped in :class:`FromSubgraph` with the namespace it came from (one element per
level, ``"<task>:<step>"``), so ``stream(..., subgraphs=True)`` can yield
``(namespace, chunk)`` like LangGraph.

A stream's consumer reads what a running run puts in a queue through :func:`drained`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from oncegraph._cancel import cancel_and_wait

Emit = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class FromSubgraph:
    """A payload a subgraph emitted, with the namespace it came from."""

    ns: tuple[str, ...]
    payload: Any


@dataclass(frozen=True, slots=True)
class Keeping:
    """An emit that says which modes it keeps: calling it calls ``emit``; ``modes`` is
    what :func:`wants` reads."""

    emit: Emit
    modes: frozenset[str]

    def __call__(self, mode: str, payload: Any) -> None:
        self.emit(mode, payload)


def modes_of(emit: Emit) -> frozenset[str] | None:
    """The modes ``emit`` keeps; None when it does not say (it keeps every mode)."""
    modes = getattr(emit, "modes", None)
    return None if modes is None else frozenset(modes)


def keeping(modes: Iterable[str] | None, emit: Emit) -> Emit:
    """``emit``, marked as keeping only ``modes`` (see :func:`wants`); ``emit`` itself
    when ``modes`` is None."""
    return emit if modes is None else Keeping(emit, frozenset(modes))


def wants(emit: Emit, mode: str) -> bool:
    """Whether ``emit`` keeps ``mode`` (True when it does not say)."""
    modes = getattr(emit, "modes", None)
    return modes is None or mode in modes


def namespaced(emit: Emit, *elements: str) -> Emit:
    """An emit for a subgraph run under namespace ``elements`` of ``emit``'s graph."""

    def child(mode: str, payload: Any) -> None:
        if isinstance(payload, FromSubgraph):
            emit(mode, FromSubgraph((*elements, *payload.ns), payload.payload))
        else:
            emit(mode, FromSubgraph(elements, payload))

    return keeping(modes_of(emit), child)


def tee(emit: Emit, also: Emit | None) -> Emit:
    """``emit``, and ``also`` when given: both get every event; the result keeps the modes
    either keeps (so neither misses one the other made the driver skip)."""
    if also is None:
        return emit

    def both(mode: str, payload: Any) -> None:
        emit(mode, payload)
        also(mode, payload)

    first, second = modes_of(emit), modes_of(also)
    return keeping(None if first is None or second is None else first | second, both)


def debug_event(step: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's ``debug`` chunk: ``{"step", "timestamp", "type", "payload"}``."""
    return {
        "step": step,
        "timestamp": datetime.now(UTC).isoformat(),
        "type": kind,
        "payload": payload,
    }


async def drained(queue: asyncio.Queue[Any], run: asyncio.Future[Any]) -> AsyncGenerator[Any]:
    """Yield what ``queue`` gets until ``run`` ends, then raise its error if it failed;
    a consumer that stops early cancels ``run`` (and waits for it). Use it under
    ``contextlib.aclosing`` so that happens as the consumer stops."""
    done = object()
    run.add_done_callback(lambda _: queue.put_nowait(done))
    try:
        while True:
            item = await queue.get()
            if item is done:
                run.result()
                return
            yield item
    finally:
        if not run.done():
            await cancel_and_wait(run)


__all__ = [
    "Emit",
    "FromSubgraph",
    "Keeping",
    "debug_event",
    "drained",
    "keeping",
    "modes_of",
    "namespaced",
    "tee",
    "wants",
]

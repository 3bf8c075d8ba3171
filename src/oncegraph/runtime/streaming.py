"""What a run emits while it runs, and how subgraphs' events reach the caller.

The driver calls ``emit(mode, payload)`` for every stream mode (``values``, ``updates``,
``debug``, ``events``; nodes add ``custom`` through ``get_stream_writer()`` and model
adapters ``messages``); the app keeps what the caller asked for. An emit function may
carry the modes it keeps (:func:`keeping`), so the driver skips building payloads no
one reads (:func:`wants`).

A subgraph's driver emits through :func:`namespaced`: each payload reaches the parent's
emit wrapped in :class:`FromSubgraph` with the namespace it came from (one element per
level, ``"<task>:<step>"``), so ``stream(..., subgraphs=True)`` can yield
``(namespace, chunk)`` like LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Emit = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class FromSubgraph:
    """A payload a subgraph emitted, with the namespace it came from."""

    ns: tuple[str, ...]
    payload: Any


def keeping(modes: Iterable[str], emit: Emit) -> Emit:
    """``emit``, marked as keeping only ``modes`` (see :func:`wants`)."""

    def marked(mode: str, payload: Any) -> None:
        emit(mode, payload)

    marked.modes = frozenset(modes)  # type: ignore[attr-defined]
    return marked


def wants(emit: Emit, mode: str) -> bool:
    """Whether ``emit`` keeps ``mode`` (True when it does not say)."""
    modes = getattr(emit, "modes", None)
    return modes is None or mode in modes


def namespaced(emit: Emit, element: str) -> Emit:
    """An emit for a subgraph run under namespace ``element`` of ``emit``'s graph."""

    def child(mode: str, payload: Any) -> None:
        if isinstance(payload, FromSubgraph):
            emit(mode, FromSubgraph((element, *payload.ns), payload.payload))
        else:
            emit(mode, FromSubgraph((element,), payload))

    modes = getattr(emit, "modes", None)
    if modes is not None:
        child.modes = modes  # type: ignore[attr-defined]
    return child


def tee(emit: Emit, also: Emit | None) -> Emit:
    """``emit``, and ``also`` when given: both get every event; the result keeps the modes
    either keeps (so neither misses one the other made the driver skip)."""
    if also is None:
        return emit

    def both(mode: str, payload: Any) -> None:
        emit(mode, payload)
        also(mode, payload)

    first, second = getattr(emit, "modes", None), getattr(also, "modes", None)
    if first is not None and second is not None:
        both.modes = frozenset(first) | frozenset(second)  # type: ignore[attr-defined]
    return both


def debug_event(step: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's ``debug`` chunk: ``{"step", "timestamp", "type", "payload"}``."""
    return {
        "step": step,
        "timestamp": datetime.now(UTC).isoformat(),
        "type": kind,
        "payload": payload,
    }


__all__ = ["Emit", "FromSubgraph", "debug_event", "keeping", "namespaced", "tee", "wants"]

"""Reducers for ``Annotated[..., reducer]`` state fields.

A reducer is ``(current, update) -> new``. :func:`add_messages` is the message-list
reducer: it appends, replaces a message whose ``id`` is already present, and gives every
message without an id a persistent one, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.errors import InvalidUpdateError
from oncegraph.ids import new_message_id


def _coerce_message(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        message = dict(value)
    elif isinstance(value, str):
        message = {"role": "user", "content": value}
    elif isinstance(value, tuple) and len(value) == 2:
        message = {"role": value[0], "content": value[1]}
    else:
        raise InvalidUpdateError(
            f"cannot use {type(value).__name__} as a message; pass a dict such as "
            '{"role": "user", "content": "..."} (or a plain string for a user message)'
        )
    if "role" not in message:
        raise InvalidUpdateError(f"message {message!r} has no 'role'")
    if not message.get("id"):
        message["id"] = new_message_id()
    return message


def normalize_messages(update: Any) -> list[dict[str, Any]]:
    """The update as a list of message dicts, each with an id (assigned here if missing)."""
    if update is None:
        return []
    if isinstance(update, Sequence) and not isinstance(update, (str, tuple, Mapping)):
        return [_coerce_message(m) for m in update]
    return [_coerce_message(update)]


class _Messages(list[Any]):
    """A message list that carries an id -> position index, shared with the lists it was
    extended from (positions of a prefix never change), so appending is O(1) instead of
    re-indexing the whole history every step. A stale entry (from a sibling list that
    diverged) is detected by checking the id at that position."""

    __slots__ = ("_ids",)
    _ids: dict[str, int]


def _ids_of(messages: list[Any]) -> dict[str, int]:
    ids = getattr(messages, "_ids", None)
    if ids is None:
        ids = {}
        for i, m in enumerate(messages):
            if type(m) is dict or isinstance(m, Mapping):
                mid = m.get("id")
                if mid is not None:
                    ids[mid] = i
    return ids


def _find(messages: list[Any], ids: dict[str, int], mid: str) -> int | None:
    pos = ids.get(mid)
    if pos is None:
        return None
    if pos < len(messages) and messages[pos].get("id") == mid:
        return pos
    for i in range(len(messages) - 1, -1, -1):  # stale shared entry: look it up for real
        if messages[i].get("id") == mid:
            return i
    return None


def add_messages(left: Any, right: Any) -> list[dict[str, Any]]:
    """Append ``right`` to ``left``; a message whose id exists replaces it in place."""
    base = left if isinstance(left, list) else list(left or ())
    incoming = normalize_messages(right)
    current = _Messages(base)
    ids = _ids_of(base)
    current._ids = ids
    for message in incoming:
        mid = message["id"]
        at = _find(current, ids, mid)
        if at is None:
            ids[mid] = len(current)
            current.append(message)
        else:
            current[at] = message
            ids[mid] = at
    return current


def append(left: Any, right: Any) -> list[Any]:
    """List concatenation that accepts a single item: ``Annotated[list, append]``."""
    items = right if isinstance(right, list) else [right]
    return [*(left or ()), *items]

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


def add_messages(left: Any, right: Any) -> list[dict[str, Any]]:
    """Append ``right`` to ``left``; a message whose id exists replaces it in place."""
    current = list(left or ())
    incoming = normalize_messages(right)
    if not incoming:
        return current
    index = {m["id"]: i for i, m in enumerate(current) if isinstance(m, Mapping) and "id" in m}
    for message in incoming:
        at = index.get(message["id"])
        if at is None:
            index[message["id"]] = len(current)
            current.append(message)
        else:
            current[at] = message
    return current


def append(left: Any, right: Any) -> list[Any]:
    """List concatenation that accepts a single item: ``Annotated[list, append]``."""
    items = right if isinstance(right, list) else [right]
    return [*(left or ()), *items]

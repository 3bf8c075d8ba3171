"""Reducers for ``Annotated[..., reducer]`` state fields.

A reducer is ``(current, update) -> new``. :func:`add_messages` is the message-list
reducer: it appends, replaces a message whose ``id`` is already present, removes the
message a removal names (``{"role": "remove", "id": ...}`` or LangChain's
``RemoveMessage``), and gives every message without an id a persistent one, once.

Messages come in flavors (see :mod:`oncegraph.state.lcmessages`): our
:class:`~oncegraph.messages.MessageDict` (the default), LangChain message objects, or
each as given. A state field declares its flavor by its type; called directly,
:func:`add_messages` returns LangChain messages when it is given any (as LangGraph's
does), dicts otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from oncegraph.errors import InvalidUpdateError
from oncegraph.ids import new_message_id
from oncegraph.messages import ROLE_ALIASES, MessageDict
from oncegraph.state import lcmessages as lc

Flavor = Literal["dict", "langchain", "as_given"]


def _coerce_message(value: Any, new_id: Callable[[], str] = new_message_id) -> MessageDict:
    if isinstance(value, (dict, Mapping)):  # a dict skips the ABC check
        message = MessageDict(value)
        role = message.get("role")
        if role is None and "type" in message:  # LangChain's dict shape
            message["role"] = ROLE_ALIASES.get(str(message.pop("type")), role)
        elif role in ROLE_ALIASES and ROLE_ALIASES[role] != role:
            message["role"] = ROLE_ALIASES[role]
    elif isinstance(value, str):
        message = MessageDict(role="user", content=value)
    elif isinstance(value, tuple) and len(value) == 2:
        message = MessageDict(role=ROLE_ALIASES.get(value[0], value[0]), content=value[1])
    elif lc.is_message(value):
        message = lc.to_message_dict(value)
    else:
        raise InvalidUpdateError(
            f"cannot use {type(value).__name__} as a message; pass a dict such as "
            '{"role": "user", "content": "..."} (or a plain string for a user message)'
        )
    if message.get("role") is None:
        raise InvalidUpdateError(f"message {dict(message)!r} has no 'role'")
    if not message.get("id"):
        if message["role"] == "remove":
            raise InvalidUpdateError("a message removal needs the 'id' of the message to remove")
        message["id"] = new_id()
    return message


def _coerce_langchain(value: Any, new_id: Callable[[], str] = new_message_id) -> Any:
    message = lc.to_langchain(value)
    if not message.id:
        message = lc.with_id(message, new_id())
    return message


def _coerce_as_given(value: Any, new_id: Callable[[], str] = new_message_id) -> Any:
    if lc.is_message(value):
        return value if value.id else lc.with_id(value, new_id())
    return _coerce_message(value, new_id)


_COERCE = {"dict": _coerce_message, "langchain": _coerce_langchain, "as_given": _coerce_as_given}


def _items(update: Any) -> list[Any]:
    if update is None:
        return []
    if type(update) is list:  # the common case, without the ABC checks below
        return list(update)
    if isinstance(update, Sequence) and not isinstance(update, (str, tuple, Mapping)):
        return list(update)
    return [update]


def normalize_messages(
    update: Any, flavor: Flavor = "dict", new_id: Callable[[], str] | None = None
) -> list[Any]:
    """The update as a list of messages of ``flavor``, each with an id (assigned here,
    once, if missing: ``new_id()``, a fresh random id by default; a task passes ids
    derived from its run, step, node and position, so a re-run makes the same ones)."""
    coerce = _COERCE[flavor]
    if new_id is None:
        return [coerce(m) for m in _items(update)]
    return [coerce(m, new_id) for m in _items(update)]


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
            mid = lc.message_id(m)
            if mid is not None:
                ids[mid] = i
    return ids


def _find(messages: list[Any], ids: dict[str, int], mid: str) -> int | None:
    pos = ids.get(mid)
    if pos is None:
        return None
    if pos < len(messages) and lc.message_id(messages[pos]) == mid:
        return pos
    for i in range(len(messages) - 1, -1, -1):  # stale shared entry: look it up for real
        if lc.message_id(messages[i]) == mid:
            return i
    return None


_DICTS = (MessageDict, dict)


def _is_removal(message: Any) -> bool:
    if isinstance(message, (dict, Mapping)):
        return message.get("role") == "remove"
    return getattr(message, "type", None) == "remove"


def _flavor_of(left: Any, incoming: list[Any]) -> Flavor:
    if any(lc.is_message(m) for m in incoming):
        return "langchain"
    if isinstance(left, Sequence) and left and lc.is_message(left[0]):
        return "langchain"
    return "dict"


def merge_messages(left: Any, incoming: list[Any]) -> list[Any]:
    """``left`` with ``incoming`` (already normalized, each with an id) merged in."""
    base = left if isinstance(left, list) else list(left or ())
    current = _Messages(base)
    ids = _ids_of(base)
    current._ids = ids
    for message in incoming:
        if type(message) in _DICTS:  # what a dict channel holds: read without the ABCs
            mid = message.get("id")
            removal = message.get("role") == "remove"
        else:
            mid = lc.message_id(message)
            removal = _is_removal(message)
        at = _find(current, ids, mid)
        if removal:
            if at is None:
                raise InvalidUpdateError(f"cannot remove message {mid!r}: no message has that id")
            del current[at]
            ids = current._ids = {lc.message_id(m): i for i, m in enumerate(current)}
        elif at is None:
            ids[mid] = len(current)
            current.append(message)
        else:
            current[at] = message
            ids[mid] = at
    return current


def add_messages(left: Any, right: Any) -> list[Any]:
    """Append ``right`` to ``left``; a message whose id exists replaces it in place."""
    items = _items(right)
    flavor = _flavor_of(left, items)
    if flavor == "langchain" and left and not lc.is_message(next(iter(left))):
        left = [_coerce_langchain(m) for m in left]
    return merge_messages(left, normalize_messages(items, flavor))


def append(left: Any, right: Any) -> list[Any]:
    """List concatenation that accepts a single item: ``Annotated[list, append]``."""
    items = right if isinstance(right, list) else [right]
    return [*(left or ()), *items]

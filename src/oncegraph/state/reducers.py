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

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from oncegraph.errors import InvalidUpdateError
from oncegraph.ids import new_message_id
from oncegraph.messages import ROLE_ALIASES, MessageDict
from oncegraph.state import lcmessages as lc

Flavor = Literal["dict", "langchain", "as_given"]

REMOVE_ALL_MESSAGES = "__remove_all__"
"""The id of a removal that empties the list (``RemoveMessage(id=REMOVE_ALL_MESSAGES)``
or ``{"role": "remove", "id": REMOVE_ALL_MESSAGES}``); the messages after it in the same
update make the new list."""


def _lc_message_id() -> str:
    """A LangChain message's id, as LangChain and LangGraph make them (a UUID 4)."""
    return str(uuid.uuid4())


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


def _coerce_langchain(value: Any, new_id: Callable[[], str] | None = None) -> Any:
    message = lc.to_langchain(value)
    if not message.id:  # LangChain's id shape, unless the task derives one
        message = lc.with_id(message, (new_id or _lc_message_id)())
    return message


def _coerce_as_given(value: Any, new_id: Callable[[], str] | None = None) -> Any:
    if lc.is_message(value):
        return value if value.id else lc.with_id(value, (new_id or _lc_message_id)())
    return _coerce_message(value, new_id or new_message_id)


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


def _missing(mid: Any) -> InvalidUpdateError:
    return InvalidUpdateError(
        f"cannot remove message {mid!r}: no message has that id (Attempting to delete a "
        "message with an ID that doesn't exist); name the id of a message in the list, "
        "or remove them all with the id REMOVE_ALL_MESSAGES"
    )


def merge_messages(left: Any, incoming: list[Any]) -> list[Any]:
    """``left`` with ``incoming`` (already normalized, each with an id) merged in, in
    order. A removal of an id this merge removed already is a no-op (LangGraph's
    duplicate removals); :data:`REMOVE_ALL_MESSAGES` empties the list so far."""
    base = left if isinstance(left, list) else _items(left)
    current = _Messages(base)
    ids = _ids_of(base)
    current._ids = ids
    removed: set[Any] = set()
    for message in incoming:
        if type(message) in _DICTS:  # what a dict channel holds: read without the ABCs
            mid = message.get("id")
            removal = message.get("role") == "remove"
        else:
            mid = lc.message_id(message)
            removal = _is_removal(message)
        if removal and mid == REMOVE_ALL_MESSAGES:
            current = _Messages()
            ids = current._ids = {}
            continue
        at = _find(current, ids, mid)
        if removal:
            if at is None:
                if mid in removed:
                    continue
                raise _missing(mid)
            del current[at]
            removed.add(mid)
            ids = current._ids = {lc.message_id(m): i for i, m in enumerate(current)}
        elif at is None:
            ids[mid] = len(current)
            current.append(message)
        else:
            current[at] = message
            ids[mid] = at
    return current


def uniform(merged: list[Any], entries: list[Any]) -> list[Any]:
    """An ``as_given`` list in one shape: once a LangChain message is in it (LangChain is
    loaded and the update brought one, or the list starts with one), the dicts, strings
    and tuples beside it are LangChain messages too, with their ids, as LangGraph keeps
    them. Without LangChain in play it is returned as is, unscanned."""
    if lc._module() is None or not merged:
        return merged
    if not (lc.is_message(merged[0]) or any(lc.is_message(e) for e in entries)):
        return merged
    if all(lc.is_message(m) for m in merged):
        return merged
    out = _Messages(lc.to_langchain(m) for m in merged)
    out._ids = {lc.message_id(m): i for i, m in enumerate(out)}
    return out


def add_messages(
    left: Any = None, right: Any = None, *, format: str | None = None
) -> Any:
    """Append ``right`` to ``left``; a message whose id exists replaces it in place, a
    removal deletes the message it names (see :func:`merge_messages`).

    Called with ``format`` only (``Annotated[list[AnyMessage],
    add_messages(format="langchain-openai")]``) it returns the reducer of a message field
    whose messages are rewritten to OpenAI's shape as they come in (content blocks of
    other providers become OpenAI's; LangChain must be installed)."""
    if left is None and right is None:
        return messages_reducer(format)
    if left is None or right is None:
        raise InvalidUpdateError(
            "add_messages(left, right) merges two message lists; pass both (or neither, "
            "with format=..., for a reducer)"
        )
    items = _items(right)
    flavor = _flavor_of(left, items)
    if flavor == "langchain":  # every message LangChain's, each with an id
        left = [_coerce_langchain(m) for m in _items(left)]
    merged = merge_messages(left, normalize_messages(items, flavor))
    if format is not None:
        from oncegraph.state.msgformat import formatted

        return formatted(format, merged)
    return merged


def messages_reducer(format: str | None) -> Callable[[Any, Any], Any]:
    """The reducer ``add_messages(format=...)`` returns (``format`` checked here)."""
    if format is None:
        return add_messages
    from oncegraph.state.msgformat import check_format

    check_format(format)

    def reducer(left: Any, right: Any) -> Any:
        return add_messages(left, right, format=format)

    reducer.messages_format = format  # type: ignore[attr-defined]
    return reducer


def messages_format(reducer: Any) -> str | None:
    """The ``format`` of a reducer made by ``add_messages(format=...)``, else ``None``."""
    found = getattr(reducer, "messages_format", None)
    return found if isinstance(found, str) else None


def append(left: Any, right: Any) -> list[Any]:
    """List concatenation that accepts a single item: ``Annotated[list, append]``."""
    items = right if isinstance(right, list) else [right]
    return [*(left or ()), *items]

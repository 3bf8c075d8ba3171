"""LangChain messages <-> our message dicts, and their lossless JSON codec.

Nothing here imports ``langchain_core`` unless a LangChain message (or a state field
declared with one) is already in play: :func:`is_message` and :func:`is_message_type`
look the module up in ``sys.modules``, so a graph that never sees LangChain pays nothing
and does not need it installed.

Three flavors of message channel (``Annotated[list[X], add_messages]``):

* ``dict`` (``X`` is anything else, e.g. :class:`~oncegraph.messages.Message` or a bare
  ``list``): messages are :class:`~oncegraph.messages.MessageDict`; a LangChain message
  written to it is converted (:func:`to_message_dict`). Stored as plain JSON.
* ``langchain`` (``X`` is LangChain's ``AnyMessage``, ``BaseMessage`` or a subclass):
  messages are LangChain objects; dicts, strings and ``(role, content)`` tuples written
  to it are converted (:func:`to_langchain`).
* ``as_given`` (``X`` is :data:`~oncegraph.messages.AsGiven`, the type of
  :class:`oncegraph.MessagesState`): a LangChain message stays one, anything else
  becomes a ``MessageDict``; no LangChain needed until one is written.

:class:`MessageCodec` stores the messages of the last two flavors as JSON: a LangChain
message as pydantic's dump of the tagged union (``RemoveMessage`` included; it has a
``type`` and no ``role``), a dict as itself (it has a ``role``), and reads each back as
the same class. At a plain position (a field declared ``str`` or ``Any`` that is given a
message, an ``AIMessageChunk`` a node streamed), a LangChain message is stored as a
tagged JSON form of that dump and read back as the same class.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from oncegraph._json import register_tagged
from oncegraph.errors import ConfigError, InvalidUpdateError, StorageError
from oncegraph.messages import ROLE_ALIASES, MessageDict, to_message_dict

INSTALL_HINT = "pip install 'oncegraph[langchain]'"


def _module() -> Any:
    return sys.modules.get("langchain_core.messages")


def _require() -> Any:
    try:
        import langchain_core.messages as messages
    except ImportError as exc:  # pragma: no cover - langchain-core is in the dev extra
        raise ConfigError(f"LangChain messages need langchain-core: {INSTALL_HINT}") from exc
    return messages


def is_message(value: Any) -> bool:
    """True for a LangChain ``BaseMessage`` (False, without importing, if none exists)."""
    module = _module()
    return module is not None and isinstance(value, module.BaseMessage)


def is_message_type(tp: Any) -> bool:
    """True when ``tp`` is, or is a union/Annotated of, LangChain message classes."""
    module = _module()
    if module is None:
        return False
    if isinstance(tp, type):
        return issubclass(tp, module.BaseMessage)
    return any(is_message_type(a) for a in get_args(tp) if not isinstance(a, (str, int)))


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    calls = []
    for call in raw or ():
        if "function" in call:  # OpenAI's wire shape
            fn = call["function"]
            args = fn.get("arguments") or "{}"
            calls.append(
                {
                    "id": call.get("id"),
                    "name": fn["name"],
                    "args": json.loads(args) if isinstance(args, str) else args,
                }
            )
        else:
            calls.append({"id": call.get("id"), "name": call["name"], "args": call.get("args", {})})
    return calls


def to_langchain(value: Any) -> Any:
    """A message in any accepted form as a LangChain message (messages pass through)."""
    messages = _require()
    if isinstance(value, messages.BaseMessage):
        return value
    if isinstance(value, str):
        return messages.HumanMessage(content=value)
    if isinstance(value, tuple) and len(value) == 2:
        value = {"role": value[0], "content": value[1]}
    if not isinstance(value, Mapping):
        raise InvalidUpdateError(
            f"cannot use {type(value).__name__} as a message; pass a LangChain message, a "
            'dict such as {"role": "user", "content": "..."}, or a string'
        )
    raw = value.get("role", value.get("type"))
    role = ROLE_ALIASES.get(str(raw), raw)
    common: dict[str, Any] = {"content": value.get("content", "")}
    for key in ("id", "name"):
        if value.get(key):
            common[key] = value[key]
    if role == "user":
        return messages.HumanMessage(**common)
    if role == "assistant":
        return messages.AIMessage(**common, tool_calls=_tool_calls(value.get("tool_calls")))
    if role == "system":
        return messages.SystemMessage(**common)
    if role == "tool":
        status = value.get("status") or "success"
        return messages.ToolMessage(**common, tool_call_id=value["tool_call_id"], status=status)
    if role == "remove":
        return messages.RemoveMessage(id=value["id"])
    if role is None:
        raise InvalidUpdateError(f"message {dict(value)!r} has no 'role'")
    return messages.ChatMessage(**common, role=str(role))


def messages_of(state: Any, key: str = "messages") -> Sequence[Any]:
    """The messages of ``state``: its ``key`` field (a dict's key or an object's
    attribute), or ``state`` itself when it is a list of messages; ``[]`` if none."""
    if isinstance(state, list):
        return state
    if isinstance(state, Mapping):
        return state.get(key) or []
    return getattr(state, key, None) or []


def last_message(state: Any, key: str = "messages") -> Mapping[str, Any]:
    """The last message of ``state`` (see :func:`messages_of`) as a dict (a LangChain
    message is converted); ``{}`` when there is none."""
    found = messages_of(state, key)
    last = found[-1] if found else {}
    if is_message(last):
        last = to_message_dict(last)
    return last if isinstance(last, Mapping) else {}


def message_id(message: Any) -> Any:
    if isinstance(message, (dict, Mapping)):  # a dict skips the ABC check
        return message.get("id")
    return getattr(message, "id", None)


def with_id(message: Any, new_id: str) -> Any:
    """A copy of a LangChain message carrying ``new_id`` (the caller's object is kept)."""
    return message.model_copy(update={"id": new_id})


class MessageCodec:
    """Lossless JSON for the entries of a ``langchain`` or ``as_given`` message channel."""

    __slots__ = ("_adapter", "field")
    plain = False

    def __init__(self, field: str) -> None:
        self.field = field
        self._adapter: Any = None

    def _get(self) -> Any:
        if self._adapter is None:
            import pydantic

            any_message: Any = _require().AnyMessage
            self._adapter = pydantic.TypeAdapter(tuple[any_message])
        return self._adapter

    def encode(self, message: Any) -> Any:
        if isinstance(message, Mapping):  # an as_given channel's dict message
            return message
        if getattr(message, "type", None) == "remove":
            return {"type": "remove", "id": message.id}
        try:
            return self._get().dump_python((message,), mode="json", warnings="error")[0]
        except (ValueError, TypeError) as exc:
            raise InvalidUpdateError(
                f"state field {self.field!r}: cannot store {type(message).__name__} as a "
                f"LangChain message ({str(exc).splitlines()[0]})"
            ) from exc

    def decode(self, data: Any) -> Any:
        if isinstance(data, Mapping) and "role" in data:
            return MessageDict(data)
        if isinstance(data, Mapping) and data.get("type") == "remove":
            return _require().RemoveMessage(id=data["id"])
        try:
            return self._get().validate_python((data,))[0]
        except ValueError as exc:
            raise StorageError(
                f"the stored message in state field {self.field!r} is not a valid LangChain "
                f"message ({str(exc).splitlines()[0]}); nothing was modified"
            ) from exc


_PLAIN_CODEC = MessageCodec("")


def _message_json(message: Any) -> Any:
    return _PLAIN_CODEC.encode(message)


def _message_of(data: Any) -> Any:
    return _PLAIN_CODEC.decode(data)


# a LangChain message (a chunk included) at a plain position: a tagged JSON form
register_tagged("langchain_message", is_message, _message_json, _message_of)


__all__ = [
    "MessageCodec",
    "is_message",
    "is_message_type",
    "last_message",
    "message_id",
    "messages_of",
    "to_langchain",
    "to_message_dict",
    "with_id",
]

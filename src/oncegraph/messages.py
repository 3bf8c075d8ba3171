"""Chat messages as plain JSON dicts, typed with TypedDicts.

A message is ``{"role": ..., "content": ..., "id": ...}``; assistant messages may carry
``tool_calls`` (``[{"id", "name", "args"}]``) and tool messages a ``tool_call_id``.
Every message gets a persistent ``id`` once (by :func:`oncegraph.add_messages` or the
model node), because provider ids such as ``call_1`` repeat on every turn.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(TypedDict):
    id: str
    name: str
    args: dict[str, Any]


class Message(TypedDict):
    role: Role
    content: Any  # str, or a list of content parts
    id: NotRequired[str]
    name: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    status: NotRequired[Literal["success", "error"]]  # tool messages


class ToolSpec(TypedDict):
    """What a model is told about a tool: JSON-schema ``parameters``."""

    name: str
    description: str
    parameters: dict[str, Any]

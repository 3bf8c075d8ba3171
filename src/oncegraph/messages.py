"""Chat messages as plain JSON dicts, typed with TypedDicts.

A message is ``{"role": ..., "content": ..., "id": ...}``; assistant messages may carry
``tool_calls`` (``[{"id", "name", "args"}]``) and tool messages a ``tool_call_id``.
Every message gets a persistent ``id`` once (by :func:`oncegraph.add_messages` or the
model node), because provider ids such as ``call_1`` repeat on every turn. In state,
messages are :class:`MessageDict`: dicts that also read like LangChain messages
(``msg.content``, ``msg.tool_calls``).
"""

from __future__ import annotations

import sys
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


_TYPE_OF_ROLE = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}
#: Role names LangChain and LangGraph programs use, mapped to ours.
ROLE_ALIASES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
    "remove": "remove",
}


def _is_langchain(value: object) -> bool:
    module = sys.modules.get("langchain_core.messages")
    return module is not None and isinstance(value, module.BaseMessage)


class MessageDict(dict[str, Any]):
    """A chat message as a plain dict that also reads like a LangChain message.

    Every dict operation works unchanged (``msg["role"]``, ``msg.get("tool_calls")``,
    ``==`` against a dict) and it is stored as JSON exactly like a dict; attribute reads
    are views of the keys: ``msg.content``, ``msg.tool_calls`` (``[]`` when absent),
    ``msg.id``, ``msg.role``, ``msg.type`` (LangChain's name: ``human``, ``ai``,
    ``system``, ``tool``), ``msg.name``, ``msg.tool_call_id``, ``msg.text``.
    """

    __slots__ = ()
    __hash__ = None  # a dict: unhashable

    def __eq__(self, other: object) -> bool:
        """As a dict's; against a LangChain message, equal when that message as our dict
        is (role, content, id, name, tool calls), as LangGraph code compares them."""
        if isinstance(other, dict) or not _is_langchain(other):
            return dict.__eq__(self, other)
        mine, theirs = dict(self), dict(to_message_dict(other))
        mine_id = mine.pop("id", None)
        theirs.pop("id", None)
        return bool(mine_id == getattr(other, "id", None)) and mine == theirs

    def __ne__(self, other: object) -> bool:
        return not self == other

    @property
    def role(self) -> str:
        return str(self.get("role", ""))

    @property
    def type(self) -> str:
        role = self.role
        return _TYPE_OF_ROLE.get(role, role)

    @property
    def content(self) -> Any:
        return self.get("content", "")

    @property
    def id(self) -> str | None:
        return self.get("id")

    @property
    def name(self) -> str | None:
        return self.get("name")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.get("tool_calls") or []

    @property
    def tool_call_id(self) -> str | None:
        return self.get("tool_call_id")

    @property
    def text(self) -> str:
        """The text of the content (text parts joined when it is a list of parts)."""
        content = self.content
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                p if isinstance(p, str) else str(p.get("text", ""))
                for p in content
                if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text")
            )
        return "" if content is None else str(content)

    def pretty_repr(self) -> str:
        title = f" {self.type.capitalize()} Message "
        lines = [title.center(80, "="), ""]
        if self.name:
            lines.insert(1, f"Name: {self.name}")
        lines.append(self.text)
        for call in self.tool_calls:
            lines.append(f"Tool call: {call.get('name')} ({call.get('id')})")
            lines.append(f"  Args: {call.get('args')}")
        return "\n".join(lines)

    def pretty_print(self) -> None:
        print(self.pretty_repr())


def to_message_dict(message: Any) -> MessageDict:
    """A LangChain message as our dict (role, content, id, name, tool calls, status)."""
    kind = str(message.type)
    if kind == "remove":
        return MessageDict(role="remove", id=message.id)
    role = ROLE_ALIASES.get(kind.removesuffix("MessageChunk").lower())
    if role is None:
        role = str(getattr(message, "role", kind))  # ChatMessage carries its own role
    out = MessageDict(role=role, content=message.content)
    if message.id:
        out["id"] = message.id
    if message.name:
        out["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in calls
        ]
    if role == "tool":
        out["tool_call_id"] = message.tool_call_id
        status = getattr(message, "status", None)
        if status:
            out["status"] = status
    return out


class AsGiven:
    """The item type of a message list that keeps LangChain messages as given and makes
    every other message a :class:`MessageDict` (``Annotated[list[AsGiven],
    add_messages]``). Never instantiated."""


"""``MessagesState``: LangGraph's one-field chat state."""

from __future__ import annotations

from typing import Annotated, TypedDict

from oncegraph.messages import AsGiven
from oncegraph.state.reducers import add_messages


class MessagesState(TypedDict):
    """One ``messages`` list merged by :func:`~oncegraph.add_messages`.

    Subclass it to add fields (``class State(MessagesState): summary: str``). LangChain
    messages written to it stay LangChain messages (``isinstance(m, AIMessage)`` holds,
    after a restart too); dicts, strings and ``(role, content)`` tuples become
    :class:`~oncegraph.messages.MessageDict`, which reads like one (``m.content``,
    ``m.tool_calls``, ``m.type``).
    """

    messages: Annotated[list[AsGiven], add_messages]


__all__ = ["MessagesState"]

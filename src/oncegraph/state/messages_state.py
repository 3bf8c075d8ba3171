"""``MessagesState``: LangGraph's one-field chat state."""

from __future__ import annotations

from typing import Annotated, TypedDict

from oncegraph.messages import AsGiven
from oncegraph.state.reducers import add_messages


class MessagesState(TypedDict):
    """One ``messages`` list merged by :func:`~oncegraph.add_messages`.

    Subclass it to add fields (``class State(MessagesState): summary: str``). Dicts,
    strings and ``(role, content)`` tuples become :class:`~oncegraph.messages.MessageDict`,
    which reads like a LangChain message (``m.content``, ``m.tool_calls``, ``m.type``),
    and LangChain is never imported for them. Once a LangChain message is in the list,
    the list is all LangChain messages, as LangGraph keeps it (``isinstance(m, AIMessage)``
    holds, after a restart too; each message keeps its id).
    """

    messages: Annotated[list[AsGiven], add_messages]


__all__ = ["MessagesState"]

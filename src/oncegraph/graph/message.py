"""LangGraph's ``langgraph.graph.message`` names: ``add_messages``, ``MessagesState``,
``REMOVE_ALL_MESSAGES`` and ``push_message``."""

from __future__ import annotations

from typing import Any

from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.state import MessagesState, add_messages
from oncegraph.state import lcmessages as lc
from oncegraph.state.reducers import REMOVE_ALL_MESSAGES


def push_message(message: Any, *, state_key: str | None = "messages") -> Any:
    """Stream ``message`` now (``stream_mode="messages"``) from the running node and,
    unless ``state_key`` is ``None``, add it to that state field with the node's update
    (before what the node returns). The message needs an ``id``: the streamed message and
    the stored one are the same message."""
    from oncegraph.runtime.context import current_task
    from oncegraph.runtime.tasks import stream_metadata

    ctx = current_task()
    if ctx is None:
        raise ConfigError("push_message() can only be called inside a running graph node")
    if not lc.is_message(message) and lc._module() is not None:
        message = lc.to_langchain(message)
    if not lc.message_id(message):
        raise InvalidUpdateError(
            "Message ID is required: push_message streams a message and stores the same "
            "one, so give it an id (AIMessage(content=..., id='...'))"
        )
    ctx.emit("messages", (message, stream_metadata(ctx)))
    if state_key:
        ctx.pushed.append((state_key, message))
    return message


__all__ = ["REMOVE_ALL_MESSAGES", "MessagesState", "add_messages", "push_message"]

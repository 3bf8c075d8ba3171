"""``push_message``: a running node streams a message now and adds it to its update.

Reached as LangGraph's ``langgraph.graph.message.push_message``
(:mod:`oncegraph.graph.message` re-exports it); it reads the running task's context, so
it lives with the runtime.
"""

from __future__ import annotations

from typing import Any

from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.runtime.context import current_task
from oncegraph.runtime.tasks import stream_metadata
from oncegraph.state import lcmessages as lc


def push_message(message: Any, *, state_key: str | None = "messages") -> Any:
    """Stream ``message`` now (``stream_mode="messages"``) from the running node and,
    unless ``state_key`` is ``None``, add it to that state field with the node's update
    (before what the node returns). The message needs an ``id``: the streamed message and
    the stored one are the same message."""
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


__all__ = ["push_message"]

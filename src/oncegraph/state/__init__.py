"""State schemas, channels, reducers and how state is stored (codecs)."""

from oncegraph.state.messages_state import MessagesState
from oncegraph.state.reducers import add_messages, append

__all__ = ["MessagesState", "add_messages", "append"]

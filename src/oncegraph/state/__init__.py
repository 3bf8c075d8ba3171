"""State schemas, channels and reducers."""

from oncegraph.state.reducers import add_messages, append

__all__ = ["add_messages", "append"]

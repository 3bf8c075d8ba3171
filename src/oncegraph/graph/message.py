"""LangGraph's ``langgraph.graph.message`` names: ``add_messages``, ``MessagesState``,
``REMOVE_ALL_MESSAGES`` and ``push_message`` (re-exports: ``push_message`` reads the
running task, :mod:`oncegraph.runtime.push`)."""

from __future__ import annotations

from oncegraph.runtime.push import push_message
from oncegraph.state import MessagesState, add_messages
from oncegraph.state.reducers import REMOVE_ALL_MESSAGES

__all__ = ["REMOVE_ALL_MESSAGES", "MessagesState", "add_messages", "push_message"]

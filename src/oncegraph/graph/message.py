"""LangGraph's ``langgraph.graph.message`` names: ``add_messages`` and ``MessagesState``."""

from oncegraph.state import MessagesState, add_messages

__all__ = ["MessagesState", "add_messages"]

"""Graph building: ``StateGraph``, ``START``, ``END`` (and, as in LangGraph's
``langgraph.graph``, ``MessagesState`` and ``add_messages``)."""

from oncegraph.graph.builder import StateGraph
from oncegraph.graph.constants import END, START
from oncegraph.state import MessagesState, add_messages

__all__ = ["END", "START", "MessagesState", "StateGraph", "add_messages"]

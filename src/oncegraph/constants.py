"""LangGraph's ``langgraph.constants`` names: ``START`` and ``END``."""

from oncegraph.graph.constants import END, START

__all__ = ["END", "START"]

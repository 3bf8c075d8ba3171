"""Graph building: ``StateGraph``, ``START``, ``END``."""

from oncegraph.graph.builder import StateGraph
from oncegraph.graph.constants import END, START

__all__ = ["END", "START", "StateGraph"]

"""LangGraph's ``langgraph.prebuilt.tool_node`` names: ``ToolNode``, ``tools_condition``."""

from oncegraph.prebuilt.agent import tools_condition
from oncegraph.tools import ToolNode

__all__ = ["ToolNode", "tools_condition"]

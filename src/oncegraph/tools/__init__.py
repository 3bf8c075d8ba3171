"""Tools: ``@tool``, tool classes, retry policies, ``ToolNode``."""

from oncegraph.ledger.retry import RetryPolicy
from oncegraph.tools.limits import ToolLimits
from oncegraph.tools.node import ToolNode
from oncegraph.tools.tool import Tool, as_tool, tool

__all__ = ["RetryPolicy", "Tool", "ToolLimits", "ToolNode", "as_tool", "tool"]

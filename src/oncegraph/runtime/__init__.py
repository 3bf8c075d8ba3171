"""The run loop: pure engine, async driver, sync facade, context and fault injection.

For nodes, LangGraph's ``langgraph.runtime`` names: :class:`Runtime` (what a node's
``runtime`` parameter gets), :class:`ExecutionInfo` and :func:`get_runtime`."""

from oncegraph.runtime.control import RunControl, ServerInfo
from oncegraph.runtime.node_runtime import DEFAULT_RUNTIME, ExecutionInfo, Runtime, get_runtime

__all__ = [
    "DEFAULT_RUNTIME",
    "ExecutionInfo",
    "RunControl",
    "Runtime",
    "ServerInfo",
    "get_runtime",
]

"""Prebuilt graphs (the ``ReactAgent``), the chat-model port they call (``models``), and
the agent's parts: approval before tools (``approval``), structured output
(``structured``) and the model call with retries and fallbacks (``model_call``).

As LangGraph's ``langgraph.prebuilt``, it also gives ``ToolNode``, ``tools_condition`` and
``create_react_agent`` (:mod:`oncegraph.prebuilt.react`), imported on first use: the
package's modules import each other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncegraph.prebuilt.agent import tools_condition
    from oncegraph.prebuilt.react import create_react_agent
    from oncegraph.tools import ToolNode

__all__ = ["ToolNode", "create_react_agent", "tools_condition"]


def __getattr__(name: str) -> Any:
    if name == "ToolNode":
        from oncegraph.tools import ToolNode

        return ToolNode
    if name == "create_react_agent":
        from oncegraph.prebuilt.react import create_react_agent

        return create_react_agent
    if name == "tools_condition":
        from oncegraph.prebuilt.agent import tools_condition

        return tools_condition
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Tools: ``@tool``, tool classes, retry policies, ``ToolNode``."""

from typing import Any

from oncegraph.ledger.retry import EffectRetry
from oncegraph.tools.compensation import CompensationRequest
from oncegraph.tools.limits import ToolLimits
from oncegraph.tools.node import ToolNode
from oncegraph.tools.tool import Tool, as_tool, tool

__all__ = [
    "CompensationRequest",
    "EffectRetry",
    "Tool",
    "ToolLimits",
    "ToolNode",
    "as_tool",
    "tool",
]


def renamed_retry_policy(module: str) -> type[EffectRetry]:
    """``<module>.RetryPolicy``, the old name of :class:`EffectRetry`, with a warning."""
    import warnings

    warnings.warn(
        f"{module}.RetryPolicy (a tool's or a model's retry policy) is now named "
        f"{module}.EffectRetry; a node's retry policy is oncegraph.types.RetryPolicy",
        DeprecationWarning,
        stacklevel=3,
    )
    return EffectRetry


def __getattr__(name: str) -> Any:
    if name == "RetryPolicy":
        return renamed_retry_policy(__name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

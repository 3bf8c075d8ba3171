"""oncegraph: agent graphs that survive crashes without doing anything twice.

A resumed run never re-sends a command whose effect is recorded, never blindly re-sends
one whose outcome is unknown, and a replay never touches the outside world unless
someone explicitly allowed it.
"""

from oncegraph.app import CompiledGraph, StateSnapshot
from oncegraph.checkpoint import tuples as _tuples  # noqa: F401  (installs the stores' reads)
from oncegraph.config import get_stream_writer
from oncegraph.errors import (
    IncompatibleVersionError,
    NeedsReviewError,
    OnceGraphError,
    RequestMismatchError,
    StaleStateError,
    UnfinishedRunError,
)
from oncegraph.facts import now, random, uuid4
from oncegraph.graph import END, START, StateGraph
from oncegraph.hitl import Command, Send
from oncegraph.ledger import Accepted, Completed, Reconciled, aeffect, effect
from oncegraph.runtime.context import crash_point, current_effect
from oncegraph.runtime.faults import FaultPlan, declare_crash_point
from oncegraph.runtime.interrupt import Interrupt, interrupt
from oncegraph.state import MessagesState, add_messages, append
from oncegraph.tools import CompensationRequest, EffectRetry, Tool, ToolNode, tool

__version__ = "0.1.0"

__all__ = [
    "END",
    "START",
    "Accepted",
    "Command",
    "CompensationRequest",
    "CompiledGraph",
    "Completed",
    "EffectRetry",
    "FaultPlan",
    "IncompatibleVersionError",
    "Interrupt",
    "MessagesState",
    "NeedsReviewError",
    "OnceGraphError",
    "Reconciled",
    "RequestMismatchError",
    "Send",
    "StaleStateError",
    "StateGraph",
    "StateSnapshot",
    "Tool",
    "ToolNode",
    "UnfinishedRunError",
    "__version__",
    "add_messages",
    "aeffect",
    "append",
    "crash_point",
    "current_effect",
    "declare_crash_point",
    "effect",
    "get_stream_writer",
    "interrupt",
    "now",
    "random",
    "tool",
    "uuid4",
]


def __getattr__(name: str) -> object:
    if name == "RetryPolicy":  # the old name of EffectRetry
        from oncegraph.tools import renamed_retry_policy

        return renamed_retry_policy(__name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

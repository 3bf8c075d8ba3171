"""LangGraph's ``langgraph.types`` names, for code that imports them from there:
``Send``, ``Command``, ``interrupt``, ``Interrupt``, ``RetryPolicy`` (a NODE retry
policy in LangGraph's shape; tools take :class:`oncegraph.EffectRetry`),
``StreamWriter``, ``StateSnapshot`` and ``PregelTask``."""

from oncegraph.config import StreamWriter
from oncegraph.graph.retry import RetryPolicy
from oncegraph.hitl import Command, Send
from oncegraph.runs.snapshots import PregelTask
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.interrupt import Interrupt, interrupt

__all__ = [
    "Command",
    "Interrupt",
    "PregelTask",
    "RetryPolicy",
    "Send",
    "StateSnapshot",
    "StreamWriter",
    "interrupt",
]

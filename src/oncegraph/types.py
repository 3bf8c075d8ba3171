"""LangGraph's ``langgraph.types`` names, for code that imports them from there:
``Send``, ``Command``, ``interrupt``, ``Interrupt``, ``RetryPolicy`` (a NODE retry
policy in LangGraph's shape; tools take :class:`oncegraph.EffectRetry`),
``StreamWriter``, ``CachePolicy`` (node caching), ``Overwrite`` (bypass a reducer),
``StateSnapshot``, ``StateUpdate`` (an update of ``bulk_update_state``) and
``PregelTask``."""

from typing import Any, NamedTuple

from oncegraph.cache.base import CachePolicy
from oncegraph.config import StreamWriter
from oncegraph.graph.retry import RetryPolicy
from oncegraph.graph.timeouts import TimeoutPolicy
from oncegraph.hitl import Command, Send
from oncegraph.runs.snapshots import PregelTask
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.interrupt import Interrupt, interrupt
from oncegraph.state.overwrite import Overwrite


class StateUpdate(NamedTuple):
    """One update of ``bulk_update_state``: the values, the node they stand for."""

    values: dict[str, Any] | None
    as_node: str | None = None
    task_id: str | None = None


__all__ = [
    "CachePolicy",
    "Command",
    "Interrupt",
    "Overwrite",
    "PregelTask",
    "RetryPolicy",
    "Send",
    "StateSnapshot",
    "StateUpdate",
    "StreamWriter",
    "TimeoutPolicy",
    "interrupt",
]

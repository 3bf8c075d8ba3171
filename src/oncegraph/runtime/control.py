"""Run-scoped controls a caller hands to one run, in LangGraph's shape.

:class:`RunControl` (``invoke(..., control=RunControl())``) lets the caller, from any
thread, ask a running graph to *drain*: the step that is running finishes (its tasks'
results are committed as usual), no further step starts, and the call raises
:class:`oncegraph.errors.GraphDrained` naming the reason. The run stays unfinished and
resumable: ``invoke(None, config)`` goes on from the step it stopped before, so nothing
that finished is redone. A drain asked during the run's last step changes nothing (the
run ends normally).

:class:`ServerInfo` is what a deployment says about the assistant a run belongs to; a
node reads it as ``runtime.server_info``, built from ``configurable["assistant_id"]``,
``["graph_id"]`` and ``["langgraph_auth_user"]`` when the caller passes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RunControl:
    """One run's drain switch (make a new one per run; a drained control stays drained).

    Safe to call from any thread: the request is one attribute write."""

    __slots__ = ("_reason",)

    def __init__(self) -> None:
        self._reason: str | None = None

    def request_drain(self, reason: str = "shutdown") -> None:
        """Ask the run to stop before its next step (the running step finishes)."""
        self._reason = reason

    @property
    def drain_requested(self) -> bool:
        return self._reason is not None

    @property
    def drain_reason(self) -> str | None:
        return self._reason


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The assistant and graph a deployed run belongs to, and the user it runs for."""

    assistant_id: str
    graph_id: str
    user: Any = None


def server_info_of(configurable: Mapping[str, Any]) -> ServerInfo | None:
    """The run's :class:`ServerInfo` from its ``configurable``; ``None`` without one."""
    assistant = configurable.get("assistant_id")
    graph = configurable.get("graph_id")
    user = configurable.get("langgraph_auth_user")
    if assistant is None and graph is None and user is None:
        return None
    return ServerInfo(
        assistant_id="" if assistant is None else str(assistant),
        graph_id="" if graph is None else str(graph),
        user=user,
    )


def check_drain(control: Any, pending: bool) -> None:
    """Raise :class:`GraphDrained` when ``control`` asks to drain and a step is
    ``pending`` (the run has more to do)."""
    if pending and control is not None and control.drain_requested:
        from oncegraph.errors import GraphDrained

        raise GraphDrained(control.drain_reason or "shutdown")


__all__ = ["RunControl", "ServerInfo", "check_drain", "server_info_of"]

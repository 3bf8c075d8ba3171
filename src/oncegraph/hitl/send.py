"""``Send``: a task with its own payload (map-reduce), as in LangGraph.

A router (``add_conditional_edges``) or a node's ``Command(goto=...)`` may return
``Send("node", payload)`` items: each becomes its own task of the next step, running
``node`` with ``payload`` as its input instead of the graph's state. The sends of a step
are recorded in its checkpoint before they run (guarantee 1), their payloads encoded by the
target node's schema, so a resumed run hands each task the same payload, of the same
types; each task has its own identity (``node:i``, the i-th send of the step), so its
effects get their own command ids.

``Send(node, payload, timeout=...)`` gives that one task its own timeout instead of the
node's: a number of seconds (or a ``timedelta``) caps the attempt, a ``TimeoutPolicy``
sets its run and idle timeouts (an async node's). It is stored with the payload, so a
resumed run gives the task the same timeout.
"""

from __future__ import annotations

from typing import Any

from oncegraph._json import register_tagged


class Send:
    """Run ``node`` in the next step with ``arg`` as its input; ``timeout`` (seconds, a
    ``timedelta`` or a ``TimeoutPolicy``) overrides the node's for this task."""

    __slots__ = ("arg", "node", "timeout")

    def __init__(self, /, node: str, arg: Any, *, timeout: Any = None) -> None:
        self.node = node
        self.arg = arg
        self.timeout = timeout

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Send) and (self.node, self.arg, self.timeout) == (
            other.node,
            other.arg,
            other.timeout,
        )

    def __hash__(self) -> int:
        try:
            return hash((self.node, self.arg))
        except TypeError:  # a dict payload: equal sends still hash alike
            return hash(self.node)

    def __repr__(self) -> str:
        if self.timeout is None:
            return f"Send(node={self.node!r}, arg={self.arg!r})"
        return f"Send(node={self.node!r}, arg={self.arg!r}, timeout={self.timeout!r})"


def _send_json(send: Send) -> dict[str, Any]:
    out = {"node": send.node, "arg": send.arg}
    if send.timeout is not None:
        out["timeout"] = send.timeout
    return out


def _send_of(data: Any) -> Send:
    return Send(str(data["node"]), data.get("arg"), timeout=data.get("timeout"))


# a Send held in state or in another Send's payload is stored as a tagged JSON form
register_tagged("send", lambda v: isinstance(v, Send), _send_json, _send_of)

__all__ = ["Send"]

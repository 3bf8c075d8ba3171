"""``Send``: a task with its own payload (map-reduce), as in LangGraph.

A router (``add_conditional_edges``) or a node's ``Command(goto=...)`` may return
``Send("node", payload)`` items: each becomes its own task of the next step, running
``node`` with ``payload`` as its input instead of the graph's state. The sends of a step
are recorded in its checkpoint before they run (guarantee 1), their payloads encoded by the
target node's schema, so a resumed run hands each task the same payload, of the same
types; each task has its own identity (``node:i``, the i-th send of the step), so its
effects get their own command ids.
"""

from __future__ import annotations

from typing import Any


class Send:
    """Run ``node`` in the next step with ``arg`` as its input."""

    __slots__ = ("arg", "node")

    def __init__(self, /, node: str, arg: Any) -> None:
        self.node = node
        self.arg = arg

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Send) and (self.node, self.arg) == (other.node, other.arg)

    def __hash__(self) -> int:
        try:
            return hash((self.node, self.arg))
        except TypeError:  # a dict payload: equal sends still hash alike
            return hash(self.node)

    def __repr__(self) -> str:
        return f"Send(node={self.node!r}, arg={self.arg!r})"


__all__ = ["Send"]

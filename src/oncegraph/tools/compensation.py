"""What a compensating tool is given: the effect it undoes, as recorded.

A tool declares how its effects are undone with ``@tool(compensate=...)``: another
:class:`~oncegraph.tools.tool.Tool` (or a function, made a tool), or the name of a tool of
the same graph. An operator runs it with ``app.compensate(effect_id, actor=, reason=)``
(never the run itself, never a replay); it runs as an effect of its own, with its own
class, retry policy, reconcile hook and idempotency key (:mod:`oncegraph.runs.compensating`).

The compensating function's signature: a parameter named ``original`` receives a
:class:`CompensationRequest`; every other parameter is its own, given by the operator
(``app.compensate(..., args={...})``) and validated like any tool's arguments::

    @tool(effect="irreversible", reconcile=find_refund)
    def refund(original: CompensationRequest, note: str = "") -> dict:
        \"\"\"Refund a charge.\"\"\"
        return payments.refund(original.result["charge_id"], key=current_effect().idempotency_key)

    @tool(effect="irreversible", compensate=refund)
    def charge(order_id: str, amount: float) -> dict: ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ORIGINAL = "original"
"""The compensating function's parameter that receives the :class:`CompensationRequest`."""


@dataclass(frozen=True)
class CompensationRequest:
    """The effect being compensated, as its record holds it.

    ``args``: the arguments it was called with, with the fields its tool masks masked (a
    compensation record never copies a secret); ``result``: what it returned (or what an
    operator recorded when resolving it); ``provider_reference``: the recipient's id for
    it, when one was recorded; ``number``: 1 for its first compensation, 2 for a second
    one run with ``allow_again=True``.
    """

    effect_id: str
    effect_type: str
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    provider_reference: str | None = None
    number: int = 1


__all__ = ["ORIGINAL", "CompensationRequest"]

"""Values a tool or a reconcile hook returns to tell the ledger what happened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Accepted:
    """Return this from a tool when the provider only queued the work (status ``accepted``)."""

    result: Any = None
    provider_reference: str | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """Return this from a tool to record a ``provider_reference`` with the result."""

    result: Any = None
    provider_reference: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile(effect_record)`` hook found at the provider.

    ``Reconciled.done(result)``: the effect happened, here is its result;
    ``Reconciled.not_done()``: it did not happen, sending it now is safe;
    ``Reconciled.unknown()`` (or returning ``None``): cannot tell, park for review.
    """

    verdict: str  # done | not_done | unknown | accepted
    result: Any = None
    provider_reference: str | None = None

    @classmethod
    def done(cls, result: Any = None, provider_reference: str | None = None) -> Reconciled:
        return cls("done", result, provider_reference)

    @classmethod
    def accepted(cls, result: Any = None, provider_reference: str | None = None) -> Reconciled:
        return cls("accepted", result, provider_reference)

    @classmethod
    def not_done(cls) -> Reconciled:
        return cls("not_done")

    @classmethod
    def unknown(cls) -> Reconciled:
        return cls("unknown")

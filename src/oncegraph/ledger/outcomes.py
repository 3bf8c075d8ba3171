"""Values a tool or a reconcile hook returns to tell the ledger what happened."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """What the recipient said about an effect whose outcome was not known."""

    DONE = "done"  # it happened: here is its result
    ACCEPTED = "accepted"  # it was queued: here is what the recipient holds
    NOT_DONE = "not_done"  # it did not happen
    UNKNOWN = "unknown"  # cannot tell


@dataclass(frozen=True, slots=True)
class Accepted:
    """Return this from a tool when the provider only queued the work (status ``accepted``)."""

    result: Any = None
    provider_reference: str | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """Return this from a tool to record a ``provider_reference`` with the result, or
    the ``source_version`` of what a read tool read (a row version, an ETag, a
    document's revision, the model version a provider served): kept on the effect's
    attempt, shown with the effect, and served with the result by an evidence replay."""

    result: Any = None
    provider_reference: str | None = None
    source_version: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile(effect_record)`` hook found at the provider.

    ``Reconciled.done(result)``: the effect happened, here is its result;
    ``Reconciled.not_done()``: it did not happen, sending it now is safe;
    ``Reconciled.unknown()`` (or returning ``None``): cannot tell, park for review.
    """

    verdict: Verdict  # a plain string of the same value is read the same
    result: Any = None
    provider_reference: str | None = None

    @classmethod
    def done(cls, result: Any = None, provider_reference: str | None = None) -> Reconciled:
        return cls(Verdict.DONE, result, provider_reference)

    @classmethod
    def accepted(cls, result: Any = None, provider_reference: str | None = None) -> Reconciled:
        return cls(Verdict.ACCEPTED, result, provider_reference)

    @classmethod
    def not_done(cls) -> Reconciled:
        return cls(Verdict.NOT_DONE)

    @classmethod
    def unknown(cls) -> Reconciled:
        return cls(Verdict.UNKNOWN)

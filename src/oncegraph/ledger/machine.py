"""The effect lifecycle as data: every change of an :class:`EffectRecord`, and what a
writer must do with the record it found, as pure functions (no I/O, no clock, no loop).

Each transition takes the record and the time ``at`` and returns the next record; none
writes it. The writers (:mod:`oncegraph.ledger.perform` for a run's calls, the operator
commands of :mod:`oncegraph.runs.commands`) commit what these return, each version as
:func:`next_version` makes it: the row's compare-and-set token goes up by exactly one
per write, here and nowhere else.

The lifecycle of one effect::

    intent (pending, attempt 1 open)
      -> begin_attempt          another attempt claimed (pending)
      -> returned               completed | accepted (what the tool returned says which)
      -> failed                 the tool raised
      -> timed_out / end_attempt(unknown)   the call was stopped: its outcome is unknown
      -> close_open             an attempt left open by a crash (or closed by an operator)
      -> reconciled             the recipient said done | accepted
      -> resolved / checked     an operator checked at the recipient
      -> redelivering           an operator sends it once more

:func:`decide` says what :func:`~oncegraph.ledger.perform.perform` does with a record it
found for its command (guarantees 3 to 5): a completed record is never called again; an
unknown outcome of an irreversible call is reconciled, never sent blindly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncegraph.ledger.outcomes import Accepted, Completed, Reconciled, Verdict
from oncegraph.storage.records import (
    Attempt,
    AttemptOutcome,
    EffectClass,
    EffectRecord,
    EffectStatus,
)

CRASHED = "no outcome was recorded (crash or lost response)"
CLOSED_BY_OPERATOR = "closed by an operator"
PLANNED_UNKNOWN = "planned with its step; the process stopped before an outcome was recorded"
TIMEOUT_ELAPSED = "tool_timeout elapsed"

# -- what perform does with the record it found ----------------------------------------


@dataclass(frozen=True, slots=True)
class UseRecorded:
    """The record says what happened: hand back its result, call nothing."""

    result: Any


@dataclass(frozen=True, slots=True)
class OnRecord:
    """A decision about ``record``, the effect record found (each kind says which)."""

    record: EffectRecord


@dataclass(frozen=True, slots=True)
class OnRecordWhy(OnRecord):
    """A decision about ``record`` that says ``why`` (what happened, in words)."""

    why: str


class Run(OnRecord):
    """Call the tool (a new attempt, with the same key) on ``record``."""

    __slots__ = ()


class Probe(OnRecord):
    """An accepted effect whose tool has a probe: ask the recipient how it went."""

    __slots__ = ()


class Reconcile(OnRecordWhy):
    """The outcome is unknown and sending again is not safe: ask the recipient (or park
    for review when the tool cannot ask); ``why`` says what happened."""

    __slots__ = ()


class Refuse(OnRecord):
    """An irreversible effect that failed earlier: it is never retried automatically."""

    __slots__ = ()


class Park(OnRecordWhy):
    """Nobody can tell what happened: the run waits for an operator; ``why`` says why."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Settle:
    """The recipient said what happened: commit ``record``, hand back ``result``."""

    record: EffectRecord
    result: Any
    verdict: str  # a Verdict: done or accepted


Decision = UseRecorded | Run | Probe | Reconcile | Refuse | Park | Settle


def decide(
    found: EffectRecord, effect_class: EffectClass, *, has_probe: bool, at: float
) -> UseRecorded | Run | Probe | Reconcile | Refuse:
    """What to do with ``found``, the record of this command (already checked to be this
    call's). ``read`` and ``model`` effects are not side effects: anything but a completed
    record runs again. For the others, by status:

    * ``completed``: its result, never a new call;
    * ``accepted``: its result, or the tool's probe decides (``has_probe``);
    * ``failed``: an irreversible one is refused, anything else runs again;
    * ``pending``: the outcome is UNKNOWN (its holder is gone); open attempts are closed as
      unknown, then an operator's ``resolved_not_done`` lets it run once more, an
      irreversible one is reconciled, a write runs again with the same key.
    """
    status = found.status
    if status is EffectStatus.COMPLETED:
        return UseRecorded(found.result)
    if effect_class in (EffectClass.READ, EffectClass.MODEL):
        return Run(found)
    if status is EffectStatus.ACCEPTED:
        return Probe(found) if has_probe else UseRecorded(found.result)
    if status is EffectStatus.FAILED:
        if effect_class is EffectClass.IRREVERSIBLE:
            return Refuse(found)
        return Run(found)
    record = close_open(found, at)
    if not record.attempts:  # a planned intent: the call may have started before a crash
        record = planned_unknown(record, at)
    if record.attempts[-1].outcome == AttemptOutcome.RESOLVED_NOT_DONE:
        # an operator checked at the recipient: it did not happen; send it, same key
        return Run(record)
    if effect_class is EffectClass.IRREVERSIBLE:
        return Reconcile(record, "was sent but its outcome is unknown")
    return Run(record)


def after_verdict(
    record: EffectRecord, verdict: Any, why: str, *, may_send: bool, at: float
) -> UseRecorded | Run | Park | Settle:
    """What the recipient's answer (a reconcile or probe hook's return) means for
    ``record``. Anything but a :class:`Reconciled` is ``unknown``. ``may_send``: False
    when the call timed out, so a request still on its way could arrive: ``not_done``
    then parks instead of sending again."""
    if not isinstance(verdict, Reconciled) or verdict.verdict == Verdict.UNKNOWN:
        if record.status is EffectStatus.ACCEPTED:
            return UseRecorded(record.result)
        return Park(record, why + " and reconcile could not tell")
    if verdict.verdict == Verdict.NOT_DONE:
        if not may_send:
            return Park(
                record,
                why + "; reconcile found nothing at the recipient, but a request that "
                "timed out may still arrive, so it is not sent again automatically",
            )
        return Run(record)
    return Settle(reconciled(record, verdict, at), verdict.result, verdict.verdict)


# -- what one call returned -------------------------------------------------------------


def outcome_of(value: Any) -> tuple[EffectStatus, Any, str | None]:
    """What a tool's return value records: (status, result, provider reference). An
    :class:`Accepted` or :class:`Completed` says so; any other value is a completed result."""
    if isinstance(value, Accepted):
        return EffectStatus.ACCEPTED, value.result, value.provider_reference
    if isinstance(value, Completed):
        return EffectStatus.COMPLETED, value.result, value.provider_reference
    return EffectStatus.COMPLETED, value, None


def error_text(error: BaseException) -> str:
    """How a tool's exception is recorded on its attempt and record."""
    return f"{type(error).__name__}: {error}"


# -- transitions ----------------------------------------------------------------------------


def next_version(record: EffectRecord, at: float) -> EffectRecord:
    """``record`` as its next write stores it: ``row_version`` one up, stamped ``at``."""
    return record.replace(row_version=record.row_version + 1, updated_at=at)


def completed_at_once(
    record: EffectRecord, result: Any, at: float, row_version: int
) -> EffectRecord:
    """A record that is complete as it is first written, with ``result`` (nothing is
    called: the run's own facts): its one attempt begun and completed ``at``, stored as
    ``row_version``."""
    return record.replace(
        status=EffectStatus.COMPLETED,
        result=result,
        attempts=(Attempt(1, at, at, AttemptOutcome.COMPLETED),),
        row_version=row_version,
        created_at=at,
        updated_at=at,
    )


def intent(record: EffectRecord, at: float) -> EffectRecord:
    """The first write of a command's record (inserted, not compared): pending, attempt
    1 begun ``at``, row version 1."""
    return record.replace(status=EffectStatus.PENDING, attempts=(Attempt(1, at),), row_version=1)


def begin_attempt(record: EffectRecord, at: float) -> EffectRecord:
    """Another attempt claimed: pending again, a new attempt open from ``at``."""
    attempts = (*record.attempts, Attempt(len(record.attempts) + 1, at))
    return record.replace(status=EffectStatus.PENDING, attempts=attempts)


def end_attempt(
    record: EffectRecord,
    outcome: AttemptOutcome,
    error: str | None,
    at: float,
    source_version: str | None = None,
) -> EffectRecord:
    """``record`` with its last attempt ended ``at`` with ``outcome`` (status unchanged)."""
    if not record.attempts:
        return record
    last = record.attempts[-1]
    ended = Attempt(last.number, last.started_at, at, outcome, error, source_version)
    return record.replace(attempts=(*record.attempts[:-1], ended))


def returned(
    record: EffectRecord, value: Any, at: float, *, reference: str | None = None
) -> EffectRecord:
    """The tool returned ``value``: completed or accepted (:func:`outcome_of`), its
    provider reference the value's, else ``reference``; no error."""
    status, result, given = outcome_of(value)
    version = value.source_version if isinstance(value, Completed) else None
    ended = end_attempt(record, AttemptOutcome(status.value), None, at, version)
    return ended.replace(
        status=status, result=result, provider_reference=given or reference, error=None
    )


def failed(
    record: EffectRecord, error: str, at: float, *, reference: str | None = None
) -> EffectRecord:
    """The tool raised (``error``, see :func:`error_text`) and is not tried again here:
    failed; the provider reference becomes ``reference`` when one is given."""
    ended = end_attempt(record, AttemptOutcome.FAILED, error, at)
    return ended.replace(
        status=EffectStatus.FAILED,
        error=error,
        provider_reference=reference or record.provider_reference,
    )


def timed_out(record: EffectRecord, at: float) -> EffectRecord:
    """The call was stopped at its timeout: what it did is unknown (still pending)."""
    return end_attempt(record, AttemptOutcome.TIMEOUT, TIMEOUT_ELAPSED, at)


def _closed(attempt: Attempt, at: float, why: str) -> Attempt:
    if attempt.ended_at is not None:
        return attempt
    return Attempt(attempt.number, attempt.started_at, at, AttemptOutcome.UNKNOWN, why)


def close_open(record: EffectRecord, at: float, why: str = CRASHED) -> EffectRecord:
    """Every attempt still open ended ``at`` as ``unknown`` (``why``): its holder is gone,
    so it was cut off by a crash, or an operator closes it before acting."""
    if all(a.ended_at is not None for a in record.attempts):
        return record
    return record.replace(attempts=tuple(_closed(a, at, why) for a in record.attempts))


def planned_unknown(record: EffectRecord, at: float) -> EffectRecord:
    """A planned intent (:mod:`oncegraph.ledger.planned`) found on a resume: its call
    starts without a commit, so whether it started is unknown: one unknown attempt."""
    attempt = Attempt(1, record.created_at, at, AttemptOutcome.UNKNOWN, PLANNED_UNKNOWN)
    return record.replace(attempts=(attempt,))


def reconciled(record: EffectRecord, verdict: Reconciled, at: float) -> EffectRecord:
    """The recipient said ``done`` or ``accepted``: open attempts closed as unknown, the
    answer kept as a ``reconciled`` attempt, the status and result its."""
    status = EffectStatus.COMPLETED if verdict.verdict == Verdict.DONE else EffectStatus.ACCEPTED
    closed = close_open(record, at)
    n = len(closed.attempts) + 1
    return closed.replace(
        status=status,
        result=verdict.result,
        provider_reference=verdict.provider_reference or record.provider_reference,
        attempts=(*closed.attempts, Attempt(n, at, at, AttemptOutcome.RECONCILED)),
    )


def resolved(record: EffectRecord, found: Reconciled, note: str, at: float) -> EffectRecord:
    """An operator checked at the recipient (``note``: who and why) and ``found`` it done
    (completed with its result) or not done (left pending: the next attempt sends it once
    more with the same key, :func:`decide`). Open attempts are closed first."""
    done = found.verdict == Verdict.DONE
    if not done and found.verdict != Verdict.NOT_DONE:
        raise ValueError(f"an operator resolves an effect as done or not done, not {found!r}")
    closed = close_open(record, at, CLOSED_BY_OPERATOR)
    mark = AttemptOutcome.RESOLVED_DONE if done else AttemptOutcome.RESOLVED_NOT_DONE
    attempts = (*closed.attempts, Attempt(len(closed.attempts) + 1, at, at, mark, note))
    if not done:
        return closed.replace(status=EffectStatus.PENDING, attempts=attempts)
    return closed.replace(
        status=EffectStatus.COMPLETED,
        result=found.result,
        provider_reference=found.provider_reference or record.provider_reference,
        error=None,
        attempts=attempts,
    )


def checked(record: EffectRecord, verdict: Reconciled, at: float) -> EffectRecord:
    """An operator asked the recipient through the tool's hook: the answer is kept as a
    ``checked_<verdict>`` attempt; ``done`` completes it, ``accepted`` keeps it accepted
    with the recipient's word; ``not_done`` and ``unknown`` change nothing else."""
    said = verdict.verdict
    mark = _checked.get(said) or f"checked_{said}"
    changed = record.replace(
        attempts=(*record.attempts, Attempt(len(record.attempts) + 1, at, at, mark))
    )
    if said not in (Verdict.DONE, Verdict.ACCEPTED):
        return changed
    return changed.replace(
        status=EffectStatus.COMPLETED if said == Verdict.DONE else EffectStatus.ACCEPTED,
        result=verdict.result,
        provider_reference=verdict.provider_reference or record.provider_reference,
        error=None,
    )


_checked = {
    Verdict.DONE: AttemptOutcome.CHECKED_DONE,
    Verdict.ACCEPTED: AttemptOutcome.CHECKED_ACCEPTED,
    Verdict.NOT_DONE: AttemptOutcome.CHECKED_NOT_DONE,
    Verdict.UNKNOWN: AttemptOutcome.CHECKED_UNKNOWN,
}


def redelivering(record: EffectRecord, at: float) -> EffectRecord:
    """An operator sends it once more: open attempts closed, a new attempt open, pending."""
    return begin_attempt(close_open(record, at, CLOSED_BY_OPERATOR), at)


__all__ = [
    "Decision",
    "Park",
    "Probe",
    "Reconcile",
    "Refuse",
    "Run",
    "Settle",
    "UseRecorded",
    "after_verdict",
    "begin_attempt",
    "checked",
    "close_open",
    "decide",
    "end_attempt",
    "error_text",
    "failed",
    "intent",
    "next_version",
    "outcome_of",
    "planned_unknown",
    "reconciled",
    "redelivering",
    "resolved",
    "returned",
    "timed_out",
]

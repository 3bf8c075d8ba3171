"""How long a recipient keeps an idempotency key, and what that means for a redelivery.

A redelivery with the SAME key is only safe while the recipient still remembers the key:
after that, the recipient treats it as a new request and performs it twice. A tool says
how long its recipient keeps a key with ``@tool(dedup_window=...)`` (seconds or a
``timedelta``; ``None``: forever; not given: unknown), or ``oncegraph probe-recipient
--record-for TOOL`` records what it measured (an audit record ``recipient_measured``).

:func:`judge` puts the window and the effect's send attempts into words for the
redelivery's preview, and says whether the window has passed (or is unknown): then the
send is refused unless the operator says ``past_dedup_window``. The window is counted
from the FIRST send with the key: a recipient that keeps keys for a day counts from
when it stored the key, and a later retry does not make it keep the key longer.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import RunStateError
from oncegraph.runs import audits
from oncegraph.storage.records import Attempt, AttemptOutcome, AuditRecord, EffectRecord
from oncegraph.tools.base import window_seconds

MEASURED = "recipient_measured"
"""The audit action (and ``details["kind"]``) of a measured dedup window."""

# Attempts that are an operator's or a hook's word about the effect, not a send of it
_NOT_SENDS = frozenset(
    {
        AttemptOutcome.RECONCILED,
        AttemptOutcome.RESOLVED_DONE,
        AttemptOutcome.RESOLVED_NOT_DONE,
        AttemptOutcome.CHECKED_DONE,
        AttemptOutcome.CHECKED_ACCEPTED,
        AttemptOutcome.CHECKED_NOT_DONE,
        AttemptOutcome.CHECKED_UNKNOWN,
    }
)


@dataclass(frozen=True, slots=True)
class Window:
    """What is known of the recipient's dedup window: declared by the tool, measured by
    ``probe-recipient``, or unknown (``seconds`` is then meaningless)."""

    known: bool
    seconds: float | None = None  # None with known: forever
    measured_at: float | None = None  # when probe-recipient measured it (else declared)

    @classmethod
    def unknown(cls) -> Window:
        return cls(False)


@dataclass(frozen=True, slots=True)
class Judgement:
    """The dedup method in words, and whether the send needs ``past_dedup_window``."""

    words: str
    past_window: bool  # the window has passed, or is unknown
    warning: str | None = None


def duration(seconds: float) -> str:
    """``86400`` -> ``"24 h"``; ``90`` -> ``"90 s"``; ``600`` -> ``"10 min"``;
    ``0.4`` -> ``"0.4 s"``."""
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        hours = seconds / 3600
        return f"{hours:.0f} h" if hours >= 10 else f"{hours:.1f} h".replace(".0 h", " h")
    return f"{seconds / 86400:.0f} days"


def sends(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The attempts that sent the effect (not a check, a reconcile or a resolution)."""
    return [a for a in attempts if a.outcome not in _NOT_SENDS]


def judge(
    record: EffectRecord, window: Window, *, new_key: bool, at: float, method: str | None = None
) -> Judgement:
    """The preview's dedup wording for ``record`` at time ``at``; ``method``: the tool's
    ``dedup=`` (how the recipient deduplicates without the key)."""
    also = f" (without the key, it deduplicates by {method})" if method else ""
    if new_key:
        return Judgement(
            "a new key: the recipient treats this as a new request, so its dedup window does "
            "not apply; if the first send arrived, this one is a second, separate request" + also,
            False,
        )
    sent = sends(record.attempts)
    ago = ""
    if sent:
        ago = f"; the last attempt was {duration(max(0.0, at - sent[-1].started_at))} ago"
        if len(sent) > 1:
            ago += f", the first {duration(max(0.0, at - sent[0].started_at))} ago"
    source = f" (measured on {_date(window.measured_at)})" if window.measured_at is not None else ""
    if not window.known:
        return Judgement(
            "same key; this tool does not say how long its recipient keeps a key" + ago + also,
            True,
            "Nobody knows whether the recipient still remembers this key: if it has "
            "forgotten it, this redelivery performs the effect a second time. Declare "
            "dedup_window= on the tool, or record a measurement with probe-recipient.",
        )
    if window.seconds is None:
        return Judgement(f"same key; the recipient keeps keys forever{source}" + ago + also, False)
    words = (
        f"same key; the recipient merges requests with this key for "
        f"{duration(window.seconds)}{source}" + ago + also
    )
    if not sent:
        return Judgement(words + "; it was never sent", False)
    elapsed = at - sent[0].started_at
    if elapsed <= window.seconds:
        return Judgement(words, False)
    return Judgement(
        words,
        True,
        f"The dedup window has passed: the key was first sent {duration(elapsed)} ago and "
        f"the recipient keeps keys for {duration(window.seconds)}, so it has probably "
        "forgotten it and will perform this effect a second time.",
    )


def recipient_has_it(record: EffectRecord) -> bool:
    """The recipient's latest word, asked through the tool's hook, is that it has the
    effect (a ``checked_done`` attempt after the last send)."""
    for attempt in reversed(record.attempts):
        if attempt.outcome == AttemptOutcome.CHECKED_DONE:
            return True
        if attempt.outcome not in _NOT_SENDS:
            return False
    return False


class PastDedupWindowError(RunStateError):
    """A same-key redelivery after the recipient's dedup window (or with none known),
    without the operator's explicit word. ``rule`` is the surface-free reason; the
    message names the flag in the caller's surface (:meth:`naming`)."""

    def __init__(self, rule: str, fix: str = "pass past_dedup_window=True") -> None:
        super().__init__(f"{rule} Nothing was sent. To send it anyway, {fix}.")
        self.rule = rule

    def naming(self, fix: str) -> PastDedupWindowError:
        """The same refusal, naming ``fix`` (the flag, field or checkbox of a surface)."""
        return PastDedupWindowError(self.rule, fix)


class RecipientHasItError(RunStateError):
    """The recipient said it has the effect: a redelivery would do it twice."""


def refuse_if_unsafe(
    record: EffectRecord, judgement: Judgement, *, past_dedup_window: bool
) -> None:
    """Raise when the confirmed send must not go out (see the module docstring)."""
    if recipient_has_it(record):
        raise RecipientHasItError(
            f"the recipient says it already has effect {record.effect_id} (asked through "
            "the tool's hook; the effect is recorded as completed with its answer), so "
            "sending it again would do it twice; nothing was sent"
        )
    if judgement.past_window and not past_dedup_window:
        raise PastDedupWindowError(
            judgement.warning or "The recipient may have forgotten this effect's key."
        )


async def window_of(store: Any, tool: Any) -> Window:
    """The tool's declared window, else the newest one ``probe-recipient`` recorded for
    it, else unknown."""
    if getattr(tool, "dedup_window_said", False):
        return Window(True, tool.dedup_window)
    found = await store.list_audit(target_id=tool.name, limit=20)
    for record in found:  # newest first
        if record.action == MEASURED and record.target_kind == "tool":
            seconds = record.details.get("seconds")
            if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                return Window(True, float(seconds), measured_at=record.at)
    return Window.unknown()


def measured_audit(tool: str, seconds: float, actor: str, **details: Any) -> AuditRecord:
    """The audit record of a dedup window ``probe-recipient`` measured for ``tool``."""
    return audits.record(
        "tool",
        tool,
        MEASURED,
        actor=actor,
        reason=f"probe-recipient measured the key kept for {duration(seconds)}",
        details={"kind": MEASURED, "tool": tool, "seconds": seconds, **details},
    )


def _date(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


__all__ = [
    "MEASURED",
    "Judgement",
    "PastDedupWindowError",
    "RecipientHasItError",
    "Window",
    "duration",
    "judge",
    "measured_audit",
    "recipient_has_it",
    "refuse_if_unsafe",
    "sends",
    "window_of",
    "window_seconds",
]

"""The dedup window's arithmetic and wording (oncegraph.runs.redelivery), and its
declaration on ``@tool``."""

from __future__ import annotations

import datetime

import pytest

from oncegraph import tool
from oncegraph.errors import ConfigError
from oncegraph.runs.redelivery import (
    PastDedupWindowError,
    RecipientHasItError,
    Window,
    duration,
    judge,
    recipient_has_it,
    refuse_if_unsafe,
    window_seconds,
)
from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus

H = 3600.0
NOW = 1_000_000.0


def _record(*attempts: tuple[float, str | None]) -> EffectRecord:
    return EffectRecord(
        effect_id="e1",
        effect_type="refund",
        effect_class=EffectClass.WRITE,
        command_id="c1",
        run_id="r1",
        thread_id="t1",
        node="tools",
        request_hash="h",
        status=EffectStatus.COMPLETED,
        attempts=tuple(
            Attempt(i + 1, started, started, outcome)
            for i, (started, outcome) in enumerate(attempts)
        ),
    )


def test_tool_dedup_window_takes_seconds_timedelta_or_none_and_remembers_unsaid() -> None:
    def refund(order_id: str) -> str:
        """Refund an order."""
        return order_id

    assert tool(dedup_window=90)(refund).dedup_window == 90.0
    day = tool(dedup_window=datetime.timedelta(hours=24))(refund)
    assert day.dedup_window == 86400.0 and day.dedup_window_said
    forever = tool(dedup_window=None)(refund)
    assert forever.dedup_window is None and forever.dedup_window_said
    assert not tool(refund).dedup_window_said
    assert tool(dedup="header Idempotency-Key", dedup_window=5)(refund).dedup == (
        "header Idempotency-Key"
    )
    with pytest.raises(ConfigError, match="cannot be negative"):
        tool(dedup_window=-1)(refund)
    for bad in ("24h", True, float("nan"), [1]):
        with pytest.raises(ConfigError, match=r"seconds \(e\.g\. 86400\), a datetime\.timedelta"):
            window_seconds(bad, "refund")


def test_durations_read_as_people_say_them() -> None:
    assert [duration(s) for s in (0.4, 3, 90, 600, 3 * H, 24 * H, 3 * 86400)] == [
        "0.4 s",
        "3 s",
        "90 s",
        "10 min",
        "3 h",
        "24 h",
        "3 days",
    ]


def test_inside_the_window_it_says_how_long_and_how_long_ago() -> None:
    judged = judge(_record((NOW - 3 * H, "completed")), Window(True, 24 * H), new_key=False, at=NOW)
    assert judged.words == (
        "same key; the recipient merges requests with this key for 24 h; the last attempt "
        "was 3 h ago"
    )
    assert not judged.past_window and judged.warning is None


def test_the_window_counts_from_the_first_send_and_ignores_checks() -> None:
    record = _record(
        (NOW - 30 * H, "timeout"), (NOW - 3 * H, "completed"), (NOW - 60, "checked_done")
    )
    judged = judge(record, Window(True, 24 * H), new_key=False, at=NOW)
    assert "the last attempt was 3 h ago, the first 30 h ago" in judged.words
    assert judged.past_window and judged.warning is not None
    assert "first sent 30 h ago" in judged.warning and "keeps keys for 24 h" in judged.warning


def test_unknown_forever_new_key_measured_and_never_sent() -> None:
    sent = _record((NOW - 3 * H, "completed"))
    unknown = judge(sent, Window.unknown(), new_key=False, at=NOW)
    assert unknown.words.startswith(
        "same key; this tool does not say how long its recipient keeps a key"
    )
    assert unknown.past_window and unknown.warning is not None
    forever = judge(sent, Window(True, None), new_key=False, at=NOW)
    assert "keeps keys forever" in forever.words and not forever.past_window
    fresh = judge(sent, Window.unknown(), new_key=True, at=NOW)
    assert "does not apply" in fresh.words and not fresh.past_window
    at = datetime.datetime(2026, 11, 30, 9, 15, tzinfo=datetime.UTC).timestamp()
    measured = judge(sent, Window(True, 24 * H, measured_at=at), new_key=False, at=NOW)
    assert "for 24 h (measured on 2026-11-30 09:15 UTC)" in measured.words
    never = judge(_record(), Window(True, 60), new_key=False, at=NOW)
    assert never.words.endswith("it was never sent") and not never.past_window
    method = judge(sent, Window(True, None), new_key=False, at=NOW, method="order_id")
    assert method.words.endswith("(without the key, it deduplicates by order_id)")


def test_refusals_name_the_flag_and_a_recipient_that_has_it_wins() -> None:
    past = judge(_record((NOW - 2 * H, "completed")), Window(True, H), new_key=False, at=NOW)
    with pytest.raises(PastDedupWindowError, match=r"To send it anyway, pass past_dedup_window"):
        refuse_if_unsafe(_record(), past, past_dedup_window=False)
    refuse_if_unsafe(_record(), past, past_dedup_window=True)  # the operator said so
    error = PastDedupWindowError("Gone.").naming("run it again with --past-dedup-window")
    assert str(error) == (
        "Gone. Nothing was sent. To send it anyway, run it again with --past-dedup-window."
    )
    has_it = _record((NOW - 60, "timeout"), (NOW, "checked_done"))
    assert recipient_has_it(has_it)
    assert not recipient_has_it(_record((NOW - 60, "checked_done"), (NOW, "completed")))
    with pytest.raises(RecipientHasItError):
        refuse_if_unsafe(has_it, past, past_dedup_window=True)

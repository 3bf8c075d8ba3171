"""The effect lifecycle (oncegraph.ledger.machine) with no store and no event loop:
every decision on a found record and every transition of an effect record."""

from __future__ import annotations

import asyncio

import pytest

from oncegraph._retrying import Try, attempts
from oncegraph.ledger import machine
from oncegraph.ledger.outcomes import Accepted, Completed, Reconciled, Verdict
from oncegraph.ledger.retry import RetryPolicy
from oncegraph.storage.records import (
    Attempt,
    AttemptOutcome,
    EffectClass,
    EffectRecord,
    EffectStatus,
)

T0, T1, T2 = 100.0, 200.0, 300.0
ALL_CLASSES = tuple(EffectClass)
SIDE_EFFECTS = (EffectClass.WRITE, EffectClass.IRREVERSIBLE)


def record(
    status: EffectStatus = EffectStatus.PENDING,
    *attempts: Attempt,
    effect_class: EffectClass = EffectClass.WRITE,
    **more: object,
) -> EffectRecord:
    fields: dict[str, object] = {
        "effect_id": "e1",
        "effect_type": "send",
        "effect_class": effect_class,
        "command_id": "c1",
        "run_id": "r1",
        "thread_id": "t1",
        "node": "tools",
        "request_hash": "h",
        "status": status,
        "attempts": attempts,
        "created_at": 50.0,
        "updated_at": 50.0,
        "row_version": 3,
        **more,
    }
    return EffectRecord(**fields)  # type: ignore[arg-type]


OPEN = Attempt(1, T0)
ENDED = Attempt(1, T0, T0 + 1, AttemptOutcome.COMPLETED)


# -- decide ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_a_completed_record_is_never_run_again(cls: EffectClass) -> None:
    found = record(EffectStatus.COMPLETED, ENDED, effect_class=cls, result={"id": 7})
    for has_probe in (True, False):
        decision = machine.decide(found, cls, has_probe=has_probe, at=T1)
        assert decision == machine.UseRecorded({"id": 7})


@pytest.mark.parametrize("cls", (EffectClass.READ, EffectClass.MODEL))
@pytest.mark.parametrize("status", (EffectStatus.PENDING, EffectStatus.FAILED))
def test_reads_and_model_calls_run_again_unless_completed(
    cls: EffectClass, status: EffectStatus
) -> None:
    found = record(status, ENDED, effect_class=cls)
    assert machine.decide(found, cls, has_probe=False, at=T1) == machine.Run(found)


@pytest.mark.parametrize("cls", SIDE_EFFECTS)
def test_accepted_uses_its_result_or_asks_the_probe(cls: EffectClass) -> None:
    found = record(EffectStatus.ACCEPTED, ENDED, effect_class=cls, result="queued")
    assert machine.decide(found, cls, has_probe=False, at=T1) == machine.UseRecorded("queued")
    assert machine.decide(found, cls, has_probe=True, at=T1) == machine.Probe(found)


def test_a_failed_irreversible_effect_is_refused_a_failed_write_runs_again() -> None:
    failed_at = Attempt(1, T0, T0 + 1, AttemptOutcome.FAILED, "boom")
    irreversible = record(EffectStatus.FAILED, failed_at, effect_class=EffectClass.IRREVERSIBLE)
    write = record(EffectStatus.FAILED, failed_at)
    assert machine.decide(
        irreversible, EffectClass.IRREVERSIBLE, has_probe=True, at=T1
    ) == machine.Refuse(irreversible)
    assert machine.decide(write, EffectClass.WRITE, has_probe=False, at=T1) == machine.Run(write)


def test_unknown_outcome_of_an_irreversible_call_is_reconciled_never_resent() -> None:
    found = record(EffectStatus.PENDING, OPEN, effect_class=EffectClass.IRREVERSIBLE)
    decision = machine.decide(found, EffectClass.IRREVERSIBLE, has_probe=False, at=T1)
    assert isinstance(decision, machine.Reconcile)
    assert decision.why == "was sent but its outcome is unknown"
    (closed,) = decision.record.attempts
    assert closed == Attempt(1, T0, T1, AttemptOutcome.UNKNOWN, machine.CRASHED)
    assert decision.record.status is EffectStatus.PENDING


def test_unknown_outcome_of_a_write_runs_again_with_the_open_attempt_closed() -> None:
    found = record(EffectStatus.PENDING, ENDED, Attempt(2, T0 + 5))
    decision = machine.decide(found, EffectClass.WRITE, has_probe=False, at=T1)
    assert isinstance(decision, machine.Run)
    assert decision.record.attempts == (
        ENDED,  # an ended attempt is kept as it is
        Attempt(2, T0 + 5, T1, AttemptOutcome.UNKNOWN, machine.CRASHED),
    )
    assert decision.record.row_version == found.row_version  # nothing written yet


def test_a_planned_intent_found_later_gets_an_unknown_attempt() -> None:
    found = record(EffectStatus.PENDING, row_version=1)
    decision = machine.decide(found, EffectClass.WRITE, has_probe=False, at=T1)
    assert isinstance(decision, machine.Run)
    assert decision.record.attempts == (
        Attempt(1, 50.0, T1, AttemptOutcome.UNKNOWN, machine.PLANNED_UNKNOWN),
    )
    # an irreversible record in that state would be reconciled, not sent
    irreversible = record(EffectStatus.PENDING, effect_class=EffectClass.IRREVERSIBLE)
    decided = machine.decide(irreversible, EffectClass.IRREVERSIBLE, has_probe=False, at=T1)
    assert isinstance(decided, machine.Reconcile)


def test_an_operators_not_done_lets_an_irreversible_effect_be_sent_once_more() -> None:
    mark = Attempt(2, T0, T0, AttemptOutcome.RESOLVED_NOT_DONE, "by ops: checked")
    found = record(EffectStatus.PENDING, ENDED, mark, effect_class=EffectClass.IRREVERSIBLE)
    decision = machine.decide(found, EffectClass.IRREVERSIBLE, has_probe=False, at=T1)
    assert decision == machine.Run(found)
    # the stored string (as read back from a row) means the same
    plain = Attempt(2, T0, T0, "resolved_not_done", "by ops")
    found = record(EffectStatus.PENDING, ENDED, plain, effect_class=EffectClass.IRREVERSIBLE)
    assert isinstance(
        machine.decide(found, EffectClass.IRREVERSIBLE, has_probe=False, at=T1), machine.Run
    )


# -- the recipient's answer -----------------------------------------------------------------


def test_done_or_accepted_settles_the_record() -> None:
    found = record(EffectStatus.PENDING, OPEN, provider_reference="old")
    done = machine.after_verdict(
        found, Reconciled.done({"ok": 1}, "ref-9"), "why", may_send=True, at=T1
    )
    assert isinstance(done, machine.Settle)
    assert done.result == {"ok": 1} and done.verdict == "done"
    assert done.record.status is EffectStatus.COMPLETED
    assert done.record.provider_reference == "ref-9"
    assert done.record.attempts == (
        Attempt(1, T0, T1, AttemptOutcome.UNKNOWN, machine.CRASHED),
        Attempt(2, T1, T1, AttemptOutcome.RECONCILED),
    )
    accepted = machine.after_verdict(found, Reconciled.accepted("q"), "why", may_send=True, at=T1)
    assert isinstance(accepted, machine.Settle)
    assert accepted.record.status is EffectStatus.ACCEPTED
    assert accepted.record.provider_reference == "old"  # kept when none is given


@pytest.mark.parametrize("answer", (Reconciled.unknown(), None, "something else"))
def test_unknown_parks_a_pending_record_and_keeps_an_accepted_one(answer: object) -> None:
    pending = record(EffectStatus.PENDING, OPEN)
    parked = machine.after_verdict(pending, answer, "is stuck", may_send=True, at=T1)
    assert parked == machine.Park(pending, "is stuck and reconcile could not tell")
    accepted = record(EffectStatus.ACCEPTED, ENDED, result="queued")
    kept = machine.after_verdict(accepted, answer, "is stuck", may_send=True, at=T1)
    assert kept == machine.UseRecorded("queued")


def test_not_done_sends_again_unless_the_call_timed_out() -> None:
    found = record(EffectStatus.PENDING, Attempt(1, T0, T0 + 1, AttemptOutcome.TIMEOUT))
    sent = machine.after_verdict(found, Reconciled.not_done(), "why", may_send=True, at=T1)
    assert sent == machine.Run(found)
    held = machine.after_verdict(found, Reconciled.not_done(), "timed out", may_send=False, at=T1)
    assert isinstance(held, machine.Park)
    assert held.why.startswith("timed out; reconcile found nothing")


def test_a_verdict_given_as_a_plain_string_means_the_same() -> None:
    found = record(EffectStatus.PENDING, OPEN)
    decision = machine.after_verdict(found, Reconciled("done", 1), "why", may_send=True, at=T1)  # type: ignore[arg-type]
    assert isinstance(decision, machine.Settle)
    assert decision.record.status is EffectStatus.COMPLETED
    assert Reconciled.done().verdict == "done" and Reconciled.done().verdict is Verdict.DONE


# -- transitions ----------------------------------------------------------------------------


def test_next_version_bumps_the_row_version_by_exactly_one() -> None:
    found = record(EffectStatus.PENDING, OPEN)
    new = machine.next_version(found, T2)
    assert new.row_version == found.row_version + 1
    assert new.updated_at == T2
    assert machine.next_version(new, T2).row_version == found.row_version + 2
    # no other transition touches the version: only the write does
    for changed in (
        machine.begin_attempt(found, T1),
        machine.returned(found, 1, T1),
        machine.failed(found, "E: x", T1),
        machine.timed_out(found, T1),
        machine.close_open(found, T1),
        machine.resolved(found, Reconciled.done(), "by a: b", T1),
        machine.checked(found, Reconciled.done(), T1),
        machine.redelivering(found, T1),
    ):
        assert changed.row_version == found.row_version
        assert changed.updated_at == found.updated_at


def test_intent_is_pending_with_attempt_one_at_row_version_one() -> None:
    new = machine.intent(record(EffectStatus.PENDING, row_version=0), T0)
    assert (new.status, new.attempts, new.row_version) == (
        EffectStatus.PENDING,
        (Attempt(1, T0),),
        1,
    )


def test_begin_attempt_opens_the_next_attempt_and_makes_it_pending() -> None:
    failed = record(EffectStatus.FAILED, Attempt(1, T0, T0 + 1, AttemptOutcome.FAILED, "E"))
    again = machine.begin_attempt(failed, T1)
    assert again.status is EffectStatus.PENDING
    assert again.attempts[-1] == Attempt(2, T1)
    assert again.attempts[0] == failed.attempts[0]


def test_returned_maps_completed_accepted_and_plain_values() -> None:
    open_ = record(EffectStatus.PENDING, OPEN, error="earlier", provider_reference="old")
    plain = machine.returned(open_, {"v": 1}, T1, reference="ctx")
    assert (plain.status, plain.result, plain.provider_reference, plain.error) == (
        EffectStatus.COMPLETED,
        {"v": 1},
        "ctx",
        None,
    )
    assert plain.attempts == (Attempt(1, T0, T1, AttemptOutcome.COMPLETED),)
    done = machine.returned(open_, Completed(2, "p-1"), T1, reference="ctx")
    assert (done.status, done.result, done.provider_reference) == (
        EffectStatus.COMPLETED,
        2,
        "p-1",
    )
    queued = machine.returned(open_, Accepted("q"), T1)
    assert (queued.status, queued.result, queued.provider_reference) == (
        EffectStatus.ACCEPTED,
        "q",
        None,
    )
    assert queued.attempts[-1].outcome == "accepted"


def test_failed_records_the_error_on_the_attempt_and_the_record() -> None:
    open_ = record(EffectStatus.PENDING, OPEN, provider_reference="old", result="kept")
    error = machine.error_text(ValueError("bad input"))
    assert error == "ValueError: bad input"
    failed = machine.failed(open_, error, T1)
    assert failed.status is EffectStatus.FAILED and failed.error == error
    assert failed.attempts == (Attempt(1, T0, T1, AttemptOutcome.FAILED, error),)
    assert (failed.provider_reference, failed.result) == ("old", "kept")
    assert machine.failed(open_, error, T1, reference="new").provider_reference == "new"


def test_timed_out_and_end_attempt_leave_the_status_pending() -> None:
    open_ = record(EffectStatus.PENDING, OPEN)
    timed = machine.timed_out(open_, T1)
    assert timed.status is EffectStatus.PENDING
    assert timed.attempts == (Attempt(1, T0, T1, AttemptOutcome.TIMEOUT, machine.TIMEOUT_ELAPSED),)
    assert machine.end_attempt(record(), AttemptOutcome.UNKNOWN, None, T1) == record()


def test_close_open_closes_only_open_attempts() -> None:
    found = record(EffectStatus.PENDING, ENDED, Attempt(2, T0))
    closed = machine.close_open(found, T1, machine.CLOSED_BY_OPERATOR)
    assert closed.attempts == (
        ENDED,
        Attempt(2, T0, T1, AttemptOutcome.UNKNOWN, machine.CLOSED_BY_OPERATOR),
    )
    assert machine.close_open(closed, T2) is closed


def test_resolved_done_and_not_done() -> None:
    found = record(EffectStatus.PENDING, OPEN, provider_reference="old", error="E")
    done = machine.resolved(found, Reconciled.done({"r": 1}), "by ann: called them", T1)
    assert (done.status, done.result, done.provider_reference, done.error) == (
        EffectStatus.COMPLETED,
        {"r": 1},
        "old",
        None,
    )
    assert done.attempts == (
        Attempt(1, T0, T1, AttemptOutcome.UNKNOWN, machine.CLOSED_BY_OPERATOR),
        Attempt(2, T1, T1, AttemptOutcome.RESOLVED_DONE, "by ann: called them"),
    )
    accepted = record(EffectStatus.ACCEPTED, ENDED, result="q")
    not_done = machine.resolved(accepted, Reconciled.not_done(), "by ann: nothing there", T1)
    assert not_done.status is EffectStatus.PENDING and not_done.result == "q"
    assert not_done.attempts[-1].outcome == "resolved_not_done"
    # and the next perform sends it once more, even an irreversible one
    irreversible = machine.resolved(
        record(EffectStatus.PENDING, OPEN, effect_class=EffectClass.IRREVERSIBLE),
        Reconciled.not_done(),
        "n",
        T1,
    )
    assert isinstance(
        machine.decide(irreversible, EffectClass.IRREVERSIBLE, has_probe=False, at=T2),
        machine.Run,
    )


@pytest.mark.parametrize("found", [Reconciled.accepted("r"), Reconciled.unknown()])
def test_resolved_is_done_or_not_done_only(found: Reconciled) -> None:
    with pytest.raises(ValueError, match="done or not done"):
        machine.resolved(record(EffectStatus.PENDING, OPEN), found, "by ann: ?", T1)


@pytest.mark.parametrize(
    ("verdict", "status", "mark"),
    [
        (Reconciled.done("r", "p"), EffectStatus.COMPLETED, "checked_done"),
        (Reconciled.accepted("r", "p"), EffectStatus.ACCEPTED, "checked_accepted"),
        (Reconciled.not_done(), EffectStatus.PENDING, "checked_not_done"),
        (Reconciled.unknown(), EffectStatus.PENDING, "checked_unknown"),
    ],
)
def test_checked_keeps_each_answer_as_an_attempt(
    verdict: Reconciled, status: EffectStatus, mark: str
) -> None:
    found = record(EffectStatus.PENDING, OPEN, provider_reference="old", result="before")
    changed = machine.checked(found, verdict, T1)
    assert changed.status is status
    assert changed.attempts == (OPEN, Attempt(2, T1, T1, mark))
    if status is EffectStatus.PENDING:
        assert (changed.result, changed.provider_reference) == ("before", "old")
    else:
        assert (changed.result, changed.provider_reference) == ("r", "p")


def test_redelivering_closes_open_attempts_and_opens_one() -> None:
    found = record(EffectStatus.COMPLETED, ENDED, Attempt(2, T0), result="r")
    sending = machine.redelivering(found, T1)
    assert sending.status is EffectStatus.PENDING
    assert sending.attempts == (
        ENDED,
        Attempt(2, T0, T1, AttemptOutcome.UNKNOWN, machine.CLOSED_BY_OPERATOR),
        Attempt(3, T1),
    )


def test_outcomes_are_stored_as_their_strings() -> None:
    assert AttemptOutcome.RESOLVED_NOT_DONE == "resolved_not_done"
    assert f"{AttemptOutcome.FAILED}" == "failed" and str(Verdict.NOT_DONE) == "not_done"
    assert {o.value for o in AttemptOutcome} >= {
        "completed",
        "accepted",
        "failed",
        "timeout",
        "unknown",
        "reconciled",
        "resolved_done",
    }


# -- retries --------------------------------------------------------------------------------


def test_attempts_sleep_only_between_tries() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def collect(policy: object, stop_at: int | None = None) -> list[Try]:
        seen = []
        async for attempt in attempts(policy, sleep):  # type: ignore[arg-type]
            seen.append(attempt)
            if attempt.number == stop_at:
                break
        return seen

    tries = asyncio.run(collect((0.05, 0.2, 0.8)))
    assert tries == [Try(1, False), Try(2, False), Try(3, False), Try(4, True)]
    assert slept == [0.05, 0.2, 0.8]
    slept.clear()
    assert asyncio.run(collect((0.05, 0.2), stop_at=1)) == [Try(1, False)]
    assert slept == []  # a body that succeeds first time waits for nothing
    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, backoff=2.0, jitter=0.0)
    assert asyncio.run(collect(policy)) == [Try(1, False), Try(2, False), Try(3, True)]
    assert slept == [1.0, 2.0]
    slept.clear()
    assert asyncio.run(collect(RetryPolicy(max_attempts=1))) == [Try(1, True)]
    assert slept == []

"""Compensation: a new effect of its own, linked both ways, audited, at most once.

Every case runs on memory, SQLite and PostgreSQL against the fake provider (a real HTTP
server that keeps each effect once per idempotency key): ``charge`` is compensated by
``refund``, which files a ticket at the provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _compensation_app import CHARGED, Shop, T

from oncegraph import FaultPlan
from oncegraph.errors import ConfigError, RunStateError, _CrashSignal
from oncegraph.runs import compensating
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass, EffectStatus, RunStatus
from oncegraph.testing.crash import run_in_subprocess
from oncegraph.testing.provider import FakeProvider

WORKER = Path(__file__).with_name("_compensation_app.py")


@pytest.fixture
def shop(checkpointer: Checkpointer) -> Any:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider.url)


def _audits(shop: Shop, effect_id: str) -> list[Any]:
    return [a for a in shop.app.audit(target_id=effect_id) if a.action == "compensate"]


def test_compensate_runs_the_refund_once_as_a_new_linked_audited_effect(shop: Shop) -> None:
    charge = shop.book()
    run = shop.app.get_run(charge.run_id)
    assert run.status is RunStatus.COMPLETED
    done = shop.app.compensate(charge.effect_id, actor="ana", reason="customer cancelled")

    refund = done.effect
    assert refund.effect_id != charge.effect_id
    assert refund.effect_type == "refund" and refund.effect_class is EffectClass.IRREVERSIBLE
    assert refund.status is EffectStatus.COMPLETED and not done.resumed
    assert refund.run_id == charge.run_id and refund.recipient == "payments"
    # the compensating tool got the original as recorded, its card masked
    assert refund.request["original"]["effect_id"] == charge.effect_id
    assert refund.request["original"]["args"] == {"order_id": "1042", "card": "***"}
    (ticket,) = shop.tickets()
    assert ticket["idempotency_key"] == refund.effect_id  # its own key, not the charge's
    assert ticket["body"]["title"] == f"refund {charge.result['id']} of 1042"
    assert shop.refunds == [refund.effect_id]

    # linked both ways, from the store
    assert compensating.compensates(refund) == charge.effect_id
    by = shop.app.effects(run_id=charge.run_id)
    assert compensating.links(by) == {charge.effect_id: (refund.effect_id,)}
    (listed,) = shop.app.compensations(charge.effect_id)
    assert listed.effect_id == refund.effect_id and listed.status is EffectStatus.COMPLETED
    assert listed.request["original"]["args"]["card"] == "***"
    (audit,) = _audits(shop, charge.effect_id)
    assert (audit.actor, audit.reason) == ("ana", "customer cancelled")
    assert audit.details["compensation"] == refund.effect_id
    assert audit.details["compensates"] == charge.effect_id
    # the run itself is untouched
    assert shop.app.get_run(charge.run_id).status is RunStatus.COMPLETED
    assert shop.effect("charge").status is EffectStatus.COMPLETED


def test_a_second_compensation_is_refused_unless_allowed_again(shop: Shop) -> None:
    charge = shop.book()
    first = shop.app.compensate(charge.effect_id, actor="ana", reason="cancelled")
    with pytest.raises(RunStateError, match="already compensated") as refused:
        shop.app.compensate(charge.effect_id, actor="bo", reason="again?")
    assert first.effect.effect_id in str(refused.value) and "allow_again" in str(refused.value)
    assert len(shop.tickets()) == 1 and len(_audits(shop, charge.effect_id)) == 1

    again = shop.app.compensate(
        charge.effect_id, actor="bo", reason="the first went to a closed card", allow_again=True
    )
    assert again.effect.effect_id != first.effect.effect_id
    assert again.effect.request["original"]["number"] == 2
    assert len(shop.tickets()) == 2
    audits = _audits(shop, charge.effect_id)
    assert len(audits) == 2 and audits[0].details.get("again") is True


def test_a_failed_compensation_does_not_count_as_one(shop: Shop) -> None:
    charge = shop.book()
    failed = shop.app.compensate(charge.effect_id, actor="ana", reason="r", args={"note": "refuse"})
    assert failed.effect.status is EffectStatus.FAILED and "refused" in (failed.effect.error or "")
    assert shop.tickets() == []
    done = shop.app.compensate(charge.effect_id, actor="ana", reason="try again")
    assert done.effect.status is EffectStatus.COMPLETED and not done.resumed
    assert done.effect.request["original"]["number"] == 2 and len(shop.tickets()) == 1
    statuses = [e.status for e in shop.app.compensations(charge.effect_id)]
    assert statuses == [EffectStatus.FAILED, EffectStatus.COMPLETED]


def test_only_a_completed_effect_of_a_tool_with_a_compensation_is_compensated(
    shop: Shop,
) -> None:
    charge = shop.book()
    with pytest.raises(ConfigError, match=r"@tool\(compensate="):
        shop.app.compensate(shop.effect("note").effect_id, actor="ana", reason="undo")
    with pytest.raises(ConfigError, match="required"):
        shop.app.compensate(charge.effect_id, actor="ana", reason=" ")
    done = shop.app.compensate(charge.effect_id, actor="ana", reason="r")
    # the refund itself declares no compensation
    with pytest.raises(ConfigError, match=r"@tool\(compensate="):
        shop.app.compensate(done.effect.effect_id, actor="ana", reason="undo the undo")
    assert len(shop.tickets()) == 1


def test_an_uncertain_effect_is_refused_with_the_fix(checkpointer: Checkpointer) -> None:
    """A charge whose outcome is unknown (crashed inside the call, parked): check or
    resolve it first; once resolved done, it is compensated."""
    with FakeProvider() as provider:
        shop = Shop(checkpointer, provider.url)
        with pytest.raises(_CrashSignal):
            shop.app.invoke(
                {"messages": [{"role": "user", "content": "x"}]},
                {"thread_id": T, "fault_plan": FaultPlan(CHARGED)},
            )
        charge = shop.effect("charge")
        assert charge.status is EffectStatus.PENDING
        with pytest.raises(RunStateError, match="check_effect") as refused:
            shop.app.compensate(charge.effect_id, actor="ana", reason="undo")
        assert "resolve_effect" in str(refused.value)
        shop.app.resolve_effect(
            charge.effect_id, "done", actor="ana", reason="seen", result={"id": "ch_9"}
        )
        done = shop.app.compensate(charge.effect_id, actor="ana", reason="undo")
        assert done.effect.status is EffectStatus.COMPLETED
        assert shop.tickets()[0]["body"]["title"] == "refund ch_9 of 1042"


def test_a_crash_between_intent_and_call_is_finished_once(shop: Shop) -> None:
    charge = shop.book()
    crash = FaultPlan("after_intent")
    with pytest.raises(_CrashSignal):
        run_sync(
            shop.app.service.compensate(
                charge.effect_id, actor="ana", reason="r", fault_plan=crash
            ),
            "compensate",
        )
    (pending,) = [e for e in shop.app.effects(run_id=charge.run_id) if e.effect_type == "refund"]
    assert pending.status is EffectStatus.PENDING and shop.tickets() == []
    done = shop.app.compensate(charge.effect_id, actor="bo", reason="go on")
    assert done.resumed and done.effect.effect_id == pending.effect_id
    assert done.effect.status is EffectStatus.COMPLETED
    assert len(shop.tickets()) == 1


def test_a_replay_never_compensates_and_serves_the_run_as_recorded(shop: Shop) -> None:
    charge = shop.book()
    shop.app.compensate(charge.effect_id, actor="ana", reason="cancelled")
    replay = shop.app.replay(charge.run_id, mode="evidence", actor="ana", reason="debug")
    assert str(replay.status) == "completed"
    assert len(shop.tickets()) == 1 and len(shop.refunds) == 1


@pytest.mark.parametrize(
    ("checkpointer", "point"),
    [
        ("sqlite", "after_intent"),
        ("sqlite", "after_tool_return"),
        ("postgres", "after_tool_return"),
    ],
    indirect=["checkpointer"],
)
def test_a_killed_compensation_resumed_in_a_fresh_process_refunds_once(
    checkpointer: Checkpointer, tmp_path: Path, point: str, request: pytest.FixtureRequest
) -> None:
    """SIGKILL at the point; a fresh process compensates again: the provider holds one
    refund, and after the call had reached it the refund body does not run again (the
    irreversible refund is reconciled, not re-sent). Two OS processes per case (~3 s each
    on a loaded machine): the point of the test is a process that really dies."""
    where = (
        ["--pg", request.getfixturevalue("fresh_dsn")]
        if "Pg" in type(checkpointer).__name__
        else ["--db", str(getattr(checkpointer, "path", ""))]
    )
    log = tmp_path / "refunds.log"
    with FakeProvider() as provider:
        base = [*where, "--provider", provider.url, "--calls-log", str(log)]
        charge_id = Shop(checkpointer, provider.url).book().effect_id
        crashed = run_in_subprocess(WORKER, [*base, "--effect", charge_id], crash_at=point)
        assert crashed.killed, crashed.stderr
        resumed = run_in_subprocess(WORKER, [*base, "--effect", charge_id], timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        report = resumed.json()
        tickets = [e for e in provider.effects() if e["kind"] == "ticket"]
    assert report["status"] == "completed" and report["resumed"] is True
    assert len(tickets) == 1 and tickets[0]["idempotency_key"] == report["effect_id"]
    # after_intent: the body never ran before the kill, and ran once after it;
    # after_tool_return: it ran before the kill, and the resume asked the provider instead
    assert log.read_text().split() == [report["effect_id"]]

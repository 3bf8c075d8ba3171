"""Operator commands: Continue, Resolve, Redeliver, and their audit records (guarantee 9, 14).

Every case runs on memory, SQLite and PostgreSQL (the ``checkpointer`` fixture) against
the fake payment provider, a real HTTP server that counts effects per key. A run is
parked the way production parks one: an irreversible tool without ``reconcile`` whose
process died inside the call (an in-process crash at a declared point), resumed.
"""

from __future__ import annotations

from typing import Any

import pytest

from oncegraph import FaultPlan, NeedsReviewError, current_effect, declare_crash_point, tool
from oncegraph.errors import (
    ConfigError,
    NoRunToResumeError,
    RunNotFoundError,
    RunStateError,
    _CrashSignal,
)
from oncegraph.ledger.outcomes import Reconciled
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runs.commands import Redelivered, RedeliveryPreview
from oncegraph.runtime.faults import crash_point
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

T = "t-op"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}
SENT = declare_crash_point("op_sent")  # the provider has the charge; nothing recorded


class Shop:
    """A support agent with an irreversible ``refund`` (masked card) over a provider."""

    def __init__(self, checkpointer: Checkpointer, provider: FakeProvider) -> None:
        self.client = ProviderClient(provider.url)
        self.bodies: list[str] = []
        client, bodies = self.client, self.bodies

        @tool(effect="irreversible", recipient="payments", mask=["card"], dedup_window=None)
        def refund(order_id: str, card: str) -> str:
            """Refund an order to a card."""
            bodies.append(current_effect().idempotency_key)
            charged = client.charge(
                10, "eur", order_id, idempotency_key=current_effect().idempotency_key
            )
            crash_point(SENT)
            return str(charged["id"])

        args = {"order_id": "1042", "card": "4111111111111111"}
        call = {"id": "c1", "name": "refund", "args": args}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
        self.app = ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)

    def parked(self) -> tuple[str, str]:
        """Crash inside the refund, resume: the run parks. Returns (run_id, effect_id)."""
        with pytest.raises(_CrashSignal):
            self.app.invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            self.app.invoke(None, {"thread_id": T})
        run = self.app.runs(thread_id=T)[0]
        assert run.status is RunStatus.NEEDS_REVIEW
        assert "resolve_effect" in str(parked.value) and "resume" in str(parked.value)
        return run.run_id, parked.value.effect_id

    def performed(self) -> int:
        return int(self.client.stats()["performed"])


@pytest.fixture
def shop(checkpointer: Checkpointer) -> Any:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider)


def _actions(shop: Shop, run_id: str) -> list[tuple[str, str, str | None]]:
    return [(a.action, a.actor, a.reason) for a in reversed(shop.app.audit(run_id=run_id))]


def test_resolve_done_then_continue_uses_the_result_without_calling(shop: Shop) -> None:
    run_id, effect_id = shop.parked()
    assert shop.performed() == 1 and len(shop.bodies) == 1
    record = shop.app.resolve_effect(
        effect_id, "done", actor="ana", reason="seen in the PSP dashboard", result="ch_1"
    )
    assert record.status is EffectStatus.COMPLETED and record.result == "ch_1"
    assert record.request["card"] == "***"  # masked in the view
    assert record.attempts[-1].outcome == "resolved_done"
    assert shop.app.runs(thread_id=T)[0].status is RunStatus.NEEDS_REVIEW  # nothing ran yet
    out = shop.app.resume(run_id, actor="ana", reason="resolved")
    assert out["messages"][-1]["content"] == "Refunded."
    tool_msg = next(m for m in out["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "ch_1"
    assert shop.performed() == 1 and len(shop.bodies) == 1  # no provider call, no body run
    assert shop.app.get_run(run_id).status is RunStatus.COMPLETED
    assert _actions(shop, run_id) == [
        ("resolve_effect", "ana", "seen in the PSP dashboard"),
        ("continue", "ana", "resolved"),
    ]


def test_resolve_not_done_then_continue_sends_once_with_the_same_key(shop: Shop) -> None:
    run_id, effect_id = shop.parked()
    shop.client.reset()  # the provider lost it: checked, not there
    shop.app.resolve_effect(effect_id, "not_done", actor="bo", reason="not in the PSP")
    shop.app.resume(run_id, actor="bo")
    assert shop.performed() == 1  # sent once more...
    assert shop.bodies == [effect_id, effect_id]  # ...with the SAME key
    (record,) = [e for e in shop.app.effects(run_id=run_id) if e.effect_type == "refund"]
    assert record.status is EffectStatus.COMPLETED
    assert [a.outcome for a in record.attempts][-2:] == ["resolved_not_done", "completed"]


def test_redeliver_previews_then_sends_exactly_one_more(shop: Shop) -> None:
    run_id, effect_id = shop.parked()
    shop.app.resolve_effect(effect_id, "done", actor="ana", reason="found", result="ch_1")
    shop.app.resume(run_id, actor="ana")
    before = shop.performed()
    preview = shop.app.redeliver(effect_id, actor="cy", reason="customer asked", new_key=True)
    assert isinstance(preview, RedeliveryPreview)
    assert preview.recipient == "payments" and preview.effect_id == effect_id
    assert preview.payload == {"order_id": "1042", "card": "***"}
    assert preview.status is EffectStatus.COMPLETED
    assert preview.last_attempt is not None and preview.last_attempt.outcome == "resolved_done"
    assert preview.dedup.startswith("new key ") and preview.key != effect_id
    assert shop.performed() == before  # a preview sends nothing
    with pytest.raises(RunStateError, match="not one that a preview"):
        shop.app.redeliver(effect_id, actor="cy", reason="x", new_key=True, confirm="nope")
    assert shop.performed() == before
    done = shop.app.redeliver(
        effect_id, actor="cy", reason="customer asked", new_key=True, confirm=preview.token
    )
    assert isinstance(done, Redelivered)
    assert shop.performed() == before + 1  # exactly one more effect at the recipient
    assert shop.bodies[-1] == preview.key
    assert done.effect.status is EffectStatus.COMPLETED
    assert done.effect.attempts[-1].outcome == "completed"
    with pytest.raises(RunStateError):  # the same token again: the effect changed since
        shop.app.redeliver(
            effect_id, actor="cy", reason="again", new_key=True, confirm=preview.token
        )
    assert shop.performed() == before + 1
    assert ("redeliver", "cy", "customer asked") in _actions(shop, run_id)


def test_commands_are_refused_where_they_do_not_apply(shop: Shop) -> None:
    run_id, effect_id = shop.parked()
    with pytest.raises(NeedsReviewError, match="resolve_effect"):  # invoke(None) is not it
        shop.app.invoke(None, {"thread_id": T})
    with pytest.raises(ConfigError, match="reason is required"):
        shop.app.resolve_effect(effect_id, "done", actor="ana", reason="")
    with pytest.raises(ConfigError, match="'done' or 'not_done'"):
        shop.app.resolve_effect(effect_id, "maybe", actor="ana", reason="r")
    with pytest.raises(RunNotFoundError):
        shop.app.resolve_effect("nope", "done", actor="ana", reason="r")
    shop.app.resolve_effect(effect_id, "done", actor="ana", reason="r", result="x")
    with pytest.raises(RunStateError, match="redeliver"):  # no longer uncertain
        shop.app.resolve_effect(effect_id, "done", actor="ana", reason="r")
    with pytest.raises(NoRunToResumeError, match=r"not waiting for an answer"):
        shop.app.resume(run_id, answer="yes", actor="ana")
    shop.app.resume(run_id, actor="ana")
    with pytest.raises(NoRunToResumeError, match="replay"):  # completed: never continued
        shop.app.resume(run_id, actor="ana")
    with pytest.raises(ConfigError, match="actor is required"):
        shop.app.resume(run_id, actor="")


def test_abandon_is_audited_and_fences_the_run(shop: Shop) -> None:
    run_id, _ = shop.parked()
    shop.app.abandon({"thread_id": T}, reason="refunded by hand", actor="dee")
    run = shop.app.get_run(run_id)
    assert run.status is RunStatus.ABANDONED and run.error == "refunded by hand"
    assert _actions(shop, run_id)[-1] == ("abandon", "dee", "refunded by hand")
    with pytest.raises(NoRunToResumeError):
        shop.app.resume(run_id, actor="dee")


# -- Check: ask the recipient again, recorded --------------------------------------------


class Checked:
    """A refund whose ``reconcile`` cannot tell during the incident (the run parks), then
    can: the operator asks again with ``check_effect``. An ``accepted`` transfer whose
    ``probe`` says it settled later."""

    def __init__(self, checkpointer: Checkpointer, provider: FakeProvider) -> None:
        self.client = ProviderClient(provider.url)
        self.dashboard_up = False
        client = self.client

        def look(record: Any) -> Reconciled:
            if not self.dashboard_up:
                return Reconciled.unknown()
            found = client.find_by_key(record.effect_id)
            return Reconciled.done(str(found["id"])) if found else Reconciled.not_done()

        @tool(
            effect="irreversible",
            recipient="payments",
            reconcile=look,
            mask=["card"],
            dedup_window=None,
        )
        def refund(order_id: str, card: str) -> str:
            """Refund an order to a card."""
            charged = client.charge(
                10, "eur", order_id, idempotency_key=current_effect().idempotency_key
            )
            crash_point(SENT)
            return str(charged["id"])

        args = {"order_id": "1042", "card": "4111111111111111"}
        call = {"id": "c1", "name": "refund", "args": args}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
        self.app = ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)


def test_check_effect_asks_reconcile_again_records_it_and_the_run_continues(
    checkpointer: Checkpointer,
) -> None:
    with FakeProvider() as provider:
        shop = Checked(checkpointer, provider)
        with pytest.raises(_CrashSignal):
            shop.app.invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            shop.app.invoke(None, {"thread_id": T})
        effect_id = parked.value.effect_id
        run_id = shop.app.runs(thread_id=T)[0].run_id

        still = shop.app.check_effect(effect_id, actor="ana", reason="dashboard down")
        assert still.verdict == "unknown" and still.effect.status is EffectStatus.PENDING
        shop.dashboard_up = True
        seen = shop.app.check_effect(effect_id, actor="ana")
        assert seen.verdict == "done" and seen.effect.status is EffectStatus.COMPLETED
        assert seen.effect.request["card"] == "***"
        outcomes = [a.outcome for a in seen.effect.attempts]
        assert outcomes[-2:] == ["checked_unknown", "checked_done"], "each check is kept"
        out = shop.app.resume(run_id, actor="ana", reason="checked")
        assert out["messages"][-1]["content"] == "Refunded."
        assert int(shop.client.stats()["performed"]) == 1, "never sent twice"
        audit = [
            (a.action, (a.details or {}).get("verdict"))
            for a in reversed(shop.app.audit(run_id=run_id))
        ]
        assert audit[:2] == [("check_effect", "unknown"), ("check_effect", "done")]
        with pytest.raises(RunStateError, match="only an uncertain effect"):
            shop.app.check_effect(effect_id, actor="ana")


def test_check_effect_without_a_hook_names_resolve(shop: Shop) -> None:
    _, effect_id = shop.parked()
    with pytest.raises(ConfigError, match=r"no reconcile hook.*resolve_effect"):
        shop.app.check_effect(effect_id, actor="ana")
    with pytest.raises(ConfigError, match="actor is required"):
        shop.app.check_effect(effect_id, actor=" ")

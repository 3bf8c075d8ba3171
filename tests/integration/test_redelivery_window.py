"""Recipient-aware redelivery: the preview asks the recipient first, says how long it keeps
the key, and a same-key send after that window is refused unless the operator says so.

Every case runs on memory, SQLite and PostgreSQL against the fake payment provider (a
real HTTP server) configured to keep idempotency keys for a short time (``key_ttl``): a
same-key send inside the window is deduplicated there, one after it is performed again.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from oncegraph import FaultPlan, NeedsReviewError, current_effect, declare_crash_point, tool
from oncegraph.errors import _CrashSignal
from oncegraph.ledger.outcomes import Reconciled
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runs.commands import Redelivered, RedeliveryPreview
from oncegraph.runs.redelivery import PastDedupWindowError, RecipientHasItError, measured_audit
from oncegraph.runtime.faults import crash_point
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient
from oncegraph.tools.tool import UNSAID

T = "t-window"
USER = {"messages": [{"role": "user", "content": "refund order 7"}]}
SENT = declare_crash_point("window_sent")  # the provider has the charge; nothing recorded
TTL = 0.4  # seconds the fake provider keeps a key


class Windowed:
    """An irreversible refund whose run parks after a crash inside the call; its
    ``reconcile`` answers what ``says`` holds (unknown until a test changes it)."""

    def __init__(self, checkpointer: Checkpointer, provider: FakeProvider, window: Any) -> None:
        self.client = ProviderClient(provider.url)
        self.says = Reconciled.unknown()
        client = self.client
        options: dict[str, Any] = {} if window is UNSAID else {"dedup_window": window}

        @tool(
            effect="irreversible",
            recipient="payments",
            reconcile=lambda record: self.says,
            **options,
        )
        def refund(order_id: str) -> str:
            """Refund an order."""
            key = current_effect().idempotency_key
            charged = client.charge(10, "eur", order_id, idempotency_key=key)
            crash_point(SENT)
            return str(charged["id"])

        call = {"id": "c1", "name": "refund", "args": {"order_id": "7"}}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
        self.app = ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)

    def parked(self) -> str:
        with pytest.raises(_CrashSignal):
            self.app.invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            self.app.invoke(None, {"thread_id": T})
        return str(parked.value.effect_id)

    def preview(self, effect_id: str, new_key: bool = False) -> RedeliveryPreview:
        found = self.app.redeliver(effect_id, actor="ana", reason="customer", new_key=new_key)
        assert isinstance(found, RedeliveryPreview)
        return found

    def performed(self) -> int:
        return int(self.client.stats()["performed"])

    def actions(self, effect_id: str) -> list[str]:
        return [a.action for a in reversed(self.app.audit(target_id=effect_id))]


def test_inside_the_window_the_same_key_is_merged_past_it_the_flag_is_needed(
    checkpointer: Checkpointer,
) -> None:
    with FakeProvider(key_ttl=TTL) as provider:
        shop = Windowed(checkpointer, provider, TTL)
        effect_id = shop.parked()
        assert shop.performed() == 1

        first = shop.preview(effect_id)
        assert first.recipient_answer is not None
        assert first.recipient_answer.startswith("unknown")  # it asked reconcile first
        assert first.status is EffectStatus.PENDING
        assert first.dedup_method.startswith(
            "same key; the recipient merges requests with this key for 0.4 s; the last attempt was "
        )
        assert not first.past_dedup_window and first.warning is None
        (asked,) = [e for e in shop.app.effects(thread_id=T) if e.effect_id == effect_id]
        assert asked.attempts[-1].outcome == "checked_unknown"  # recorded on the effect
        assert shop.actions(effect_id) == ["check_effect"]  # and in the audit log

        sent = shop.app.redeliver(effect_id, actor="ana", reason="r", confirm=first.token)
        assert isinstance(sent, Redelivered) and sent.effect.status is EffectStatus.COMPLETED
        assert shop.performed() == 1, "the recipient merged it: the key was still kept"

        time.sleep(TTL + 0.05)  # the key's first send is now past the window
        late = shop.preview(effect_id)
        assert late.recipient_answer is None  # completed: nothing uncertain to ask about
        assert late.past_dedup_window and late.warning is not None
        assert "The dedup window has passed" in late.warning
        with pytest.raises(PastDedupWindowError, match=r"past_dedup_window=True"):
            shop.app.redeliver(effect_id, actor="ana", reason="r", confirm=late.token)
        assert shop.performed() == 1 and shop.actions(effect_id).count("redeliver") == 1

        shop.app.redeliver(
            effect_id, actor="ana", reason="r", confirm=late.token, past_dedup_window=True
        )
        assert shop.performed() == 2, "past its window the recipient performed it again"
        audit = shop.app.audit(target_id=effect_id)[0]
        assert audit.action == "redeliver" and audit.details["past_dedup_window"] is True

        fresh = shop.preview(effect_id, new_key=True)  # a new key: the window does not apply
        assert not fresh.past_dedup_window and "does not apply" in fresh.dedup_method


def test_a_recipient_that_has_the_effect_is_never_sent_it_again(
    checkpointer: Checkpointer,
) -> None:
    with FakeProvider() as provider:
        shop = Windowed(checkpointer, provider, None)
        effect_id = shop.parked()
        shop.says = Reconciled.done("ch_1")
        shown = shop.preview(effect_id)
        assert shown.recipient_has_it and shown.recipient_answer is not None
        assert shown.recipient_answer.startswith("done")
        assert shown.status is EffectStatus.COMPLETED  # the answer was recorded
        for new_key in (False, True):
            token = shop.preview(effect_id, new_key=new_key).token
            with pytest.raises(RecipientHasItError, match="would do it twice"):
                shop.app.redeliver(
                    effect_id,
                    actor="ana",
                    reason="r",
                    new_key=new_key,
                    confirm=token,
                    past_dedup_window=True,
                )
        assert shop.performed() == 1
        assert "redeliver" not in shop.actions(effect_id)


def test_an_unknown_window_warns_until_probe_recipient_measured_one(
    checkpointer: Checkpointer,
) -> None:
    with FakeProvider() as provider:
        shop = Windowed(checkpointer, provider, UNSAID)
        effect_id = shop.parked()
        unknown = shop.preview(effect_id)
        assert "this tool does not say how long its recipient keeps a key" in (unknown.dedup_method)
        assert unknown.past_dedup_window and unknown.warning is not None
        with pytest.raises(PastDedupWindowError):
            shop.app.redeliver(effect_id, actor="ana", reason="r", confirm=unknown.token)
        assert shop.performed() == 1

        store = shop.app.checkpointer
        run_sync(store.append_audit(measured_audit("refund", 3600.0, "cli:ops")), "audit")
        measured = shop.preview(effect_id)
        assert "merges requests with this key for 60 min (measured on " in (measured.dedup_method)
        assert not measured.past_dedup_window
        shop.app.redeliver(effect_id, actor="ana", reason="r", confirm=measured.token)
        assert shop.performed() == 1, "merged by the recipient: no second refund"


def test_a_recipient_that_keeps_keys_forever_needs_no_flag(checkpointer: Checkpointer) -> None:
    with FakeProvider() as provider:
        shop = Windowed(checkpointer, provider, None)
        effect_id = shop.parked()
        shown = shop.preview(effect_id)
        assert "the recipient keeps keys forever" in shown.dedup_method
        assert not shown.past_dedup_window

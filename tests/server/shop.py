"""A support agent whose irreversible, masked ``refund`` goes to the fake payment
provider, and the ways the server tests put its runs in each state (as
tests/integration/test_operator_commands.py does: a crash inside the call, then a
resume, parks the run as ``needs_review``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oncegraph import FaultPlan, NeedsReviewError, current_effect, declare_crash_point, tool
from oncegraph.errors import _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import crash_point
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient
from oncegraph.tools.tool import UNSAID

USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}
CARD = "4111111111111111"
SENT = declare_crash_point("server_sent")  # the provider has the charge; nothing recorded

ADMIN = "admin-key-0001"
OPERATOR = "operator-key-01"
VIEWER = "viewer-key-0001"
ACME = "acme-operator-1"  # operator bound to tenant acme
GLOBEX = "globex-viewer-1"  # viewer bound to tenant globex
KEYS = {
    ADMIN: {"role": "admin", "name": "ada"},
    OPERATOR: {"role": "operator", "name": "otto"},
    VIEWER: {"role": "viewer", "name": "vera"},
    ACME: {"role": "operator", "tenant": "acme", "name": "acme-ops"},
    GLOBEX: {"role": "viewer", "tenant": "globex", "name": "globex-view"},
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Shop:
    """The agent over ``checkpointer``; ``performed()`` counts charges at the provider."""

    def __init__(
        self,
        checkpointer: Checkpointer,
        provider: FakeProvider,
        reconcile: Callable[..., Any] | None = None,
        dedup_window: Any = None,
    ) -> None:
        """``dedup_window``: what the refund declares (the fake provider keeps keys
        forever: None); ``UNSAID`` declares nothing."""
        self.client = ProviderClient(provider.url)
        client = self.client
        window = {} if dedup_window is UNSAID else {"dedup_window": dedup_window}

        @tool(
            effect="irreversible",
            recipient="payments",
            mask=["card"],
            reconcile=reconcile,
            **window,
        )
        def refund(order_id: str, card: str) -> str:
            """Refund an order to a card."""
            charged = client.charge(
                10, "eur", order_id, idempotency_key=current_effect().idempotency_key
            )
            crash_point(SENT)
            return str(charged["id"])

        args = {"order_id": "1042", "card": CARD}
        call = {"id": "c1", "name": "refund", "args": args}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
        self.app = ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)

    def tenant_app(self, thread: str) -> Any:
        """The app as the thread's tenant runs it (``acme:t1`` is tenant acme's), so its
        runs carry the tenant, as runs started through a tenant's API key do."""
        tenant, sep, _ = thread.partition(":")
        return self.app.for_tenant(tenant) if sep and tenant else self.app

    def parked(self, thread: str) -> tuple[str, str]:
        """Crash inside the refund, resume: the run parks. Returns (run_id, effect_id)."""
        app = self.tenant_app(thread)
        with pytest.raises(_CrashSignal):
            app.invoke(USER, {"thread_id": thread, "fault_plan": FaultPlan(SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            app.invoke(None, {"thread_id": thread})
        run = app.runs(thread_id=thread)[0]
        assert run.status is RunStatus.NEEDS_REVIEW
        return run.run_id, parked.value.effect_id

    def completed(self, thread: str) -> str:
        app = self.tenant_app(thread)
        app.invoke(USER, {"thread_id": thread})
        return app.runs(thread_id=thread)[0].run_id

    def performed(self) -> int:
        return int(self.client.stats()["performed"])


def shop_on(checkpointer: Checkpointer) -> Any:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider)

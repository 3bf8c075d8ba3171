"""The approval names what it approves, in the UI (real Chromium through Playwright, see
test_ui_browser.py): the question shows the call's effect id, recipient, masked arguments
and request hash; the form posts the hash back, so a page left open on an earlier
request (here: from before an edit) cannot approve the request waiting now; an edit
is a new request, approved on its own before anything is sent. Screenshots under the
test's tmp directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shop import ADMIN
from test_ui_browser import Operator, browser  # noqa: F401 (the browser fixture)

from conftest import start_live, stop_live
from oncegraph import tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.protocols import Checkpointer

CARD = "4111111111111111"


class _Served:
    def __init__(self, app: Any) -> None:
        self.app = app


def _agent(store: Checkpointer, sent: list[dict[str, Any]]) -> Any:
    @tool(effect="irreversible", recipient="payments", mask=["card"], dedup_window=None)
    def refund(order_id: str, card: str, amount: float) -> str:
        """Refund an order to a card."""
        sent.append({"order_id": order_id, "amount": amount})
        return f"refunded {amount:.2f}"

    args = {"order_id": "1042", "card": CARD, "amount": 59.0}
    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"id": "c1", "name": "refund", "args": args}]},
        "Done.",
    )
    agent = ReactAgent(model=model, tools=[refund], interrupt_on={"refund": True})
    return agent.compile(checkpointer=store)


def test_the_approval_form_names_the_call_and_is_bound_to_its_hash(
    browser: Any,  # noqa: F811
    sqlite_store: Checkpointer,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    sent: list[dict[str, Any]] = []
    app = _agent(sqlite_store, sent)
    out = app.invoke({"messages": [{"role": "user", "content": "refund 1042"}]}, {"thread_id": "t"})
    first = out["__interrupt__"][0].value
    (action,) = first["action_requests"]
    (run,) = app.runs(thread_id="t")
    live = start_live(_Served(app))  # type: ignore[arg-type]
    try:
        op = Operator(browser, live, ADMIN, shots)
        page = op.page
        page.goto(f"/ui/runs/{run.run_id}")
        call = page.locator("#questions .call")
        assert call.locator("[data-field=approval-effect]").inner_text() == action["effect_id"]
        assert call.locator("[data-field=approval-recipient]").inner_text() == "payments"
        assert call.locator("[data-field=approval-hash]").inner_text() == action["request_hash"]
        shown = call.locator("[data-field=approval-args]").inner_text()
        assert '"card": "***"' in shown and CARD not in page.content()
        op.shot("approval-request")
        stale = op.context.new_page()  # a second tab, left open on this request
        stale.goto(f"/ui/runs/{run.run_id}")

        form = page.locator("form[data-command=continue]")
        form.locator("input[name=decision_0][value=edit]").check()
        form.locator("textarea[name=args_0]").fill(
            '{"order_id": "1042", "card": "***", "amount": 40.0}'
        )
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#flash")
        assert sent == [], "an edit sends nothing: it is a new request"
        page.goto(f"/ui/runs/{run.run_id}")
        again = page.locator("#questions .call")
        new_hash = again.locator("[data-field=approval-hash]").inner_text()
        assert new_hash != action["request_hash"]
        assert '"amount": 40.0' in again.locator("[data-field=approval-args]").inner_text()
        op.shot("approval-edited-request")

        old = stale.locator("form[data-command=continue]")  # approves the first request
        old.locator("input[name=decision_0][value=approve]").check()
        old.locator("button[type=submit]").click()
        stale.wait_for_selector("#flash")
        stale.goto(f"/ui/runs/{run.run_id}")
        refused = stale.inner_text("#questions .flash.error")
        assert "nothing ran" in refused and sent == []
        stale.screenshot(path=str(shots / "approval-stale-refused.png"), full_page=True)

        page.goto(f"/ui/runs/{run.run_id}")
        form = page.locator("form[data-command=continue]")
        form.locator("input[name=decision_0][value=approve]").check()
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#flash")
        assert page.inner_text("#run-status") == "completed"
        assert sent == [{"order_id": "1042", "amount": 40.0}]
        op.shot("approval-edited-sent")
        op.close()
    finally:
        stop_live(live)
    (record,) = app.get_state({"thread_id": "t"}).values["approvals"]
    assert record["decision"] == "edit" and record["edited_args"]["amount"] == 40.0
    assert len(list(shots.glob("*.png"))) == 4
